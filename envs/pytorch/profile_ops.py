"""Per-node times of a PyTorch program on one device: what a torch profile records.

The functional ATen graph runs node by node (``torch.fx.Interpreter``) on the device, in
its precision, with the parameters moved there once; each node is timed alone between two
synchronisations (``torch.cuda.synchronize`` on a GPU), so a node's time is its kernel
time plus one launch, as OpenVINO's per-op profiling counts it. The time of a node is
the median over ``runs`` runs after ``warmup`` untimed ones.
"""
from __future__ import annotations

import time
from typing import Optional, Sequence

import numpy as np
import torch

from envs.pytorch.devices import TorchDevice
from envs.pytorch.stages import TensorCache, retarget

__all__ = ["profile_ops", "record_torch"]


class _Timed(torch.fx.Interpreter):
    def __init__(self, gm, device: TorchDevice, cache: TensorCache) -> None:
        super().__init__(gm, garbage_collect_values=True)
        self.device, self.cache = device, cache
        self.sync = torch.cuda.synchronize if device.is_cuda else (lambda: None)
        self.times: dict[str, float] = {}

    def call_function(self, target, args, kwargs):
        return super().call_function(target, args, retarget(kwargs, self.device))

    def fetch_attr(self, target: str):
        return self.cache.get(target, super().fetch_attr(target), self.device)

    def run_node(self, n):
        if n.op not in ("call_function", "call_method", "call_module"):
            return super().run_node(n)
        self.sync()
        start = time.perf_counter()
        out = super().run_node(n)
        self.sync()
        self.times[n.name] = time.perf_counter() - start
        return out


def profile_ops(program, device: TorchDevice, runs: int = 5, warmup: int = 2,
                cache: Optional[TensorCache] = None) -> dict[str, float]:
    """fx node name -> seconds of ``program`` on ``device`` (see the module docstring)."""
    cache = cache or TensorCache()
    interp = _Timed(program.gm, device, cache)
    inputs = [x.to(device.torch_device, device.torch_dtype if x.is_floating_point() else x.dtype)
              for x in program.example_inputs]
    samples: dict[str, list[float]] = {}
    with torch.inference_mode():
        for r in range(warmup + runs):
            interp.times = {}
            interp.run(*inputs)
            if r >= warmup:
                for k, v in interp.times.items():
                    samples.setdefault(k, []).append(v)
    return {k: float(np.median(v)) for k, v in samples.items()}


def record_torch(profile, fine, program, devices: Sequence[str], timing):
    """Per-node times of ``program`` on each torch device into ``profile`` (memory caps
    become ``mem_capacity``); returns the measuring function of the link fit."""
    from dataclasses import replace

    from envs.pytorch.backend import TorchBackend
    from envs.pytorch.stages import TensorCache

    backend = TorchBackend(fine, program, list(devices), timing)
    # op times do not depend on a memory cap (the cap is the profile's mem_capacity), and a
    # capped GPU may not hold the largest weight: time every op without the caps
    backend.apply_caps(False)
    for dev, line in zip(backend.torch_devices, backend.describe()):
        profile.devices[dev.name] = {"kind": "measured", "description": line}
        cache = backend.cache if dev.mem_bytes is None else TensorCache()
        profile.op_time_s[dev.name] = profile_ops(program, replace(dev, mem_bytes=None),
                                                  runs=max(3, timing.repeats),
                                                  warmup=max(1, timing.warmup), cache=cache)
        if dev.mem_bytes is not None:  # the weights it may hold (the fit check's budget)
            profile.mem_capacity[dev.name] = backend.weight_budget[dev.name]
            cache.clear()
    backend.apply_caps(True)
    if backend.cuda:
        import torch

        torch.cuda.empty_cache()
    return backend.measure
