"""Load any placed model the project saved: the manifest says which backend runs it.

A placed model is a folder with a ``placed.json`` manifest (format
``hsdag_ray.placed/1``) and the files its backend wrote: OpenVINO IR
(:mod:`envs.openvino.placed`) or a ``torch.export`` program
(:mod:`envs.pytorch.placed`). :func:`load_placed` reads the manifest and hands the
folder to that backend's loader, importing only that backend (a process that runs a
torch save never imports OpenVINO).
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Optional, Union

__all__ = ["LOADERS", "load_placed"]

#: the manifest's ``backend`` -> ``"module:function"`` that loads such a folder as
#: ``function(folder, manifest, threads)``; a save without one is OpenVINO's
LOADERS = {"openvino": "envs.openvino.placed:load_openvino",
           "torch": "envs.pytorch.placed:load_torch"}


def load_placed(directory: Union[str, Path], threads: Optional[int] = None):
    """Load a placed model and build it on its devices.

    Args:
        directory: the folder holding ``placed.json``.
        threads: threads per device (OpenVINO's INFERENCE_NUM_THREADS, torch's thread
            count); None = the value saved.

    Returns:
        A callable placed model: :class:`envs.openvino.placed.PlacedModel` (called with
        arrays) or :class:`envs.pytorch.placed.TorchPlaced` (called with tensors).

    Raises:
        ValueError: one sentence when the folder is not a placed model, its backend is
            unknown, a device is missing here, or a part cannot be built.
    """
    from envs.pytorch.placed import read_manifest

    folder = Path(directory)
    manifest = read_manifest(folder)
    backend = manifest.get("backend", "openvino")
    if backend not in LOADERS:
        raise ValueError(f"{folder} holds a placed model of the {backend!r} backend, which "
                         f"this version cannot load (it loads {', '.join(LOADERS)})")
    module, _, function = LOADERS[backend].partition(":")
    return getattr(importlib.import_module(module), function)(folder, manifest, threads)
