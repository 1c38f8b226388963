"""The PyTorch graph source: what the ``torch`` backend (and a simulator whose profile PyTorch
recorded) builds, checks, profiles, applies and loads. Nothing here imports OpenVINO."""
from __future__ import annotations

from typing import Optional, Sequence

from envs.source import GraphSource

__all__ = ["TorchSource", "SOURCE"]


class TorchSource(GraphSource):
    """Models exported with ``torch.export`` (:mod:`hsdag_core.torch_graph`) on PyTorch devices
    (``cpu``, ``cpu:bf16``, ``cuda:N[:mem=SIZE]``)."""

    name = "torch"
    description = "torch.export's"

    def load(self, model_spec: str, input_shapes=None):
        from hsdag_core.torch_graph import from_torch_program, load_program

        program = load_program(model_spec, input_shapes)
        return program, from_torch_program(program), None  # PyTorch fuses nothing here

    def size(self, model) -> str:
        return f"{len(model.gm.graph.nodes)} torch.export (ATen) graph nodes"

    def check_devices(self, specs: Sequence[str], threads: int = 0, here: bool = True) -> list[str]:
        from envs.pytorch.devices import check_devices, parse_device

        if not here:
            return [parse_device(s).name for s in specs]
        return [d.name for d in check_devices(list(specs))]

    def describe_devices(self, specs: Sequence[str], threads: int = 0) -> list[str]:
        from envs.pytorch.devices import parse_device

        return [parse_device(s).describe() for s in specs]

    def record_ops(self, profile, fine, model, devices: Sequence[str], timing):
        from envs.pytorch.profile_ops import record_torch

        return record_torch(profile, fine, model, devices, timing)

    def apply(self, job):
        from envs.pytorch.apply import apply_torch

        return apply_torch(job)

    def load_placed(self, folder, manifest: dict, threads: Optional[int]):
        from envs.pytorch.saved import load_torch

        return load_torch(folder, manifest, threads)


SOURCE = TorchSource()
