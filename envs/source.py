"""Where a backend's graph comes from, and everything that depends on it.

A :class:`GraphSource` is one object of a backend package (``envs/openvino/``,
``envs/pytorch/``, or a new backend's own): it builds the placement graph of a model, checks
and describes the devices that run such a model, records a profile's per-node times on them,
applies a placement (compiles, checks and times it next to the source's own rows, saves the
placed model) and loads a saved placed model. A backend kind (:class:`envs.backends.BackendKind`)
names its source, so the commands call these hooks and never compare a source's name.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

__all__ = ["GraphSource"]


class GraphSource:
    """The graph source of one or more backends; subclasses override what they support.

    Attributes:
        name: the source's name as profiles (:attr:`hsdag_core.device_profile.Profile.source`)
            and placed models' manifests record it.
        description: what the graph is, for ``--help`` (e.g. "OpenVINO's").
    """

    name: str = ""
    description: str = ""

    def load(self, model_spec: str, input_shapes=None) -> tuple[Any, Any, Optional[Callable]]:
        """``(model, fine graph, fuse)`` of ``model_spec``: ``fuse(graph)`` groups the ops the
        source fuses (``--coarsen openvino``), None when it fuses none."""
        raise NotImplementedError(f"the {self.name} graph source builds no graph")

    def build(self, model_spec: str, coarsening: str = "none", input_shapes=None):
        """``(model, fine graph, coarse graph, fine node -> coarse node)``
        (:func:`hsdag_core.coarsening.build_graph` with this source's :meth:`load`)."""
        from hsdag_core.coarsening import build_graph

        return build_graph(model_spec, coarsening, input_shapes, load=self.load)

    def size(self, model) -> str:
        """How many ops ``model`` has in this source's own terms, for ``graph``'s report."""
        return f"{len(getattr(model, 'names', ()))} nodes"

    def check_devices(self, specs: Sequence[str], threads: int = 0, here: bool = True) -> list[str]:
        """The names of the device ``specs``, each checked to be one this source's models run
        on here (``here=False``: read only); ``ValueError`` with one sentence on a bad one."""
        return list(specs)

    def describe_devices(self, specs: Sequence[str], threads: int = 0) -> list[str]:
        """One line per device spec: what it is."""
        return list(specs)

    def available(self) -> list[str]:
        """The devices found on this machine (what a run that names no backend measures on
        when there are two)."""
        return []

    def record_ops(self, profile, fine, model, devices: Sequence[str], timing) -> Callable:
        """Per-node times of ``model`` on each of ``devices`` into ``profile`` (its
        ``devices`` and ``op_time_s``); returns the function that measures a node placement
        (name -> device), which fits the profile's link costs."""
        raise NotImplementedError(f"the {self.name} graph source records no profile")

    def apply(self, job) -> dict[str, Any]:
        """Apply a placement (:class:`envs.deploy.ApplyJob`): the ``apply.json`` contents."""
        raise NotImplementedError(f"the {self.name} graph source applies no placement")

    def load_placed(self, folder, manifest: dict, threads: Optional[int]):
        """The placed model saved in ``folder``, built on its devices."""
        raise ValueError(f"{folder} holds a placed model of the {self.name} backend, which "
                         "cannot be loaded")
