"""The OpenVINO graph source: what the ``auto``, ``hetero`` and ``pipeline`` backends (and a
simulator whose profile OpenVINO recorded) build, check, profile, apply and load."""
from __future__ import annotations

from typing import Optional, Sequence

from envs.source import GraphSource

__all__ = ["OpenVINOSource", "SOURCE"]


class OpenVINOSource(GraphSource):
    """Models as ``openvino.Model`` (:func:`hsdag_core.compgraph.from_ov_model`) on OpenVINO's
    real and virtual devices (``CPU``, ``CPU_F32``, ``GPU.1``...)."""

    name = "openvino"
    description = "OpenVINO's"

    def load(self, model_spec: str, input_shapes=None):
        from hsdag_core.coarsening import load_openvino

        return load_openvino(model_spec, input_shapes)

    def size(self, model) -> str:
        return f"{len(model.get_ordered_ops())} OpenVINO ops"

    def check_devices(self, specs: Sequence[str], threads: int = 0, here: bool = True) -> list[str]:
        from envs.openvino.devices import check_devices

        return [i.name for i in check_devices(list(specs), default_threads=threads)]

    def describe_devices(self, specs: Sequence[str], threads: int = 0) -> list[str]:
        from envs.openvino.devices import DeviceSet

        return DeviceSet(list(specs), default_threads=threads).describe()

    def available(self) -> list[str]:
        """The devices OpenVINO finds on this machine."""
        import openvino as ov

        return list(ov.Core().available_devices)

    def record_ops(self, profile, fine, model, devices: Sequence[str], timing):
        from envs.openvino.node_backend import OpenVINOGraphBackend

        backend = OpenVINOGraphBackend(fine, model, list(devices), "auto", timing)
        for line, name in zip(backend.ov.device_set.describe(), backend.devices):
            profile.devices[name] = {"kind": "measured", "description": line}
            profile.op_time_s[name] = backend.ov.profile_ops(name)
        return backend.measure

    def apply(self, job):
        from envs.openvino.apply import apply_openvino

        return apply_openvino(job)

    def load_placed(self, folder, manifest: dict, threads: Optional[int]):
        from envs.openvino.saved import load_openvino

        return load_openvino(folder, manifest, threads)


SOURCE = OpenVINOSource()
