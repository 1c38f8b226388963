"""Load any placed model the project saved: the manifest says which backend runs it.

A placed model is a folder with a ``placed.json`` manifest (format
``hsdag_ray.placed/1``) and the files its backend wrote: OpenVINO IR
(:mod:`envs.openvino.saved`) or a ``torch.export`` program
(:mod:`envs.pytorch.saved`). :func:`load_placed` reads the manifest and hands the
folder to the graph source it names (:meth:`envs.source.GraphSource.load_placed`),
importing only that backend (a process that runs a torch save never imports OpenVINO).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

__all__ = ["load_placed"]


def load_placed(directory: Union[str, Path], threads: Optional[int] = None):
    """Load a placed model and build it on its devices.

    Args:
        directory: the folder holding ``placed.json``.
        threads: threads per device (OpenVINO's INFERENCE_NUM_THREADS, torch's thread
            count); None = the value saved.

    Returns:
        A callable placed model: :class:`envs.openvino.saved.PlacedModel` (called with
        arrays) or :class:`envs.pytorch.saved.TorchPlaced` (called with tensors).

    Raises:
        ValueError: one sentence when the folder is not a placed model, its backend is
            unknown, a device is missing here, or a part cannot be built.
    """
    from envs.backends import BACKENDS, OPENVINO_SOURCE, load_ref, source_named
    from envs.pytorch.saved import read_manifest

    folder = Path(directory)
    manifest = read_manifest(folder)
    if "backend" not in manifest:  # a save without one is OpenVINO's
        source = load_ref(OPENVINO_SOURCE)
    else:
        source = source_named(manifest["backend"])
    if source is None:
        known = ", ".join(dict.fromkeys(k.graph.name for k in BACKENDS.values()))
        raise ValueError(f"{folder} holds a placed model of the {manifest['backend']!r} backend, "
                         f"which this version cannot load (it loads {known})")
    return source.load_placed(folder, manifest, threads)
