"""Node placements of a placement graph measured on real devices by OpenVINO: the backend
the ``auto``, ``hetero`` and ``pipeline`` kinds build, with OpenVINO's own baselines (its
AUTO device, HETERO's own splits)."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from envs.base import Backend, Measurement, OwnRun, TimingConfig
from hsdag_core.compgraph import CompGraph, GraphError

__all__ = ["OpenVINOGraphBackend", "openvino_graph_backend"]


class OpenVINOGraphBackend(Backend):
    """Node placements of ``graph`` measured on real devices by OpenVINO.

    The node placement is expanded to an affinity for every op of the model
    by friendly name (:meth:`CompGraph.expand_placement`).
    """

    def __init__(self, graph: CompGraph, model, devices: Sequence[str], mode: str = "auto",
                 timing: TimingConfig = TimingConfig()) -> None:
        from envs.openvino.backend import OpenVINOBackend

        self.graph, self.model, self.specs, self.timing = graph, model, list(devices), timing
        self.ov = OpenVINOBackend(model, list(devices), mode=mode, timing=timing)  # type: ignore[arg-type]
        self.devices = self.ov.devices
        self.name = self.ov.name

    races = True

    def own_baselines(self) -> dict[str, object]:
        """OpenVINO's own ways to run the model over the devices: its AUTO device
        (``openvino_auto``: the whole model on the device AUTO picks) and HETERO's own splits
        (``hetero_auto``: its default per-op fallback in device order; ``hetero_pipeline``:
        MODEL_DISTRIBUTION_POLICY=PIPELINE_PARALLEL)."""
        from envs.openvino.auto import HETERO_MODES

        return {"openvino_auto": OwnRun("OpenVINO AUTO"),
                **{mode: OwnRun(f"OpenVINO HETERO {mode}") for mode in HETERO_MODES}}

    def measure_own(self, name: str) -> Measurement:
        from envs.openvino.auto import HETERO_MODES, measure_auto, measure_hetero_mode

        if name == "openvino_auto":
            return measure_auto(self.model, self.devices, self.timing)
        if name in HETERO_MODES:  # the run's device specs (a virtual device's settings)
            return measure_hetero_mode(self.model, self.specs, name, self.timing)
        return super().measure_own(name)

    def measure(self, placement: Mapping[str, str], race: bool = False) -> Measurement:
        try:
            affinity = self.graph.expand_placement(placement)
        except GraphError as e:
            return Measurement.failure(self.name, "validate", str(e))
        return self.ov.measure_ops(affinity, race)

    def measure_array(self, placement: np.ndarray, race: bool = False) -> Measurement:
        return self.measure({nm: self.devices[int(d)] for nm, d in zip(self.graph.names, placement)},
                            race=race)


def openvino_graph_backend(graph: CompGraph, *, model=None, devices: Sequence[str] = (),
                     timing: TimingConfig = TimingConfig(), backend: str = "auto", **_) -> Backend:
    """Real OpenVINO devices (registered as ``auto``, ``hetero`` and ``pipeline``, the mode)."""
    if model is None:
        raise GraphError(f"the {backend} backend measures a real model; name one with --model")
    return OpenVINOGraphBackend(graph, model, devices, backend, timing)
