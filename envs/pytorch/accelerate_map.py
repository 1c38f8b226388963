"""What a PyTorch user would do instead: Hugging Face Accelerate's ``device_map="auto"``.

:func:`accelerate_placement` asks ``accelerate.infer_auto_device_map`` for the split of the
model's submodules over the run's devices under the same memory caps (the accelerators
filled first, in order, the CPU taking the rest), and reads it onto the ``torch.export``
graph: each ATen op runs where the innermost mapped module that called it lives
(``node.meta["nn_module_stack"]``); an op called outside any mapped module (a functional
op in a ``forward``) runs where its first input is, as it does under Accelerate's hooks.
The result is measured like any placement, so the table compares like with like.
"""
from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np

from envs.pytorch.devices import TorchDevice

__all__ = ["accelerate_device_map", "accelerate_placement", "no_split_classes"]

#: memory given to an uncapped device (Accelerate needs a number for every device)
UNCAPPED = 1e15


def _host(devices: Sequence[TorchDevice]) -> TorchDevice:
    """The device Accelerate calls ``cpu``: the float32 CPU, else the first CPU device."""
    cpus = [d for d in devices if d.kind == "cpu"]
    return next((d for d in cpus if d.dtype == "float32"), cpus[0] if cpus else devices[-1])


#: bytes per parameter in each device precision (Accelerate sizes the model in float32)
_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def no_split_classes(module) -> list[str]:
    """The module classes Accelerate must not split over devices, as its documentation
    advises (any layer with a residual connection): a Hugging Face model's own
    ``_no_split_modules``, else the classes of the non-leaf blocks repeated in a
    ``Sequential`` or ``ModuleList`` (torchvision's ``Bottleneck``, ``CNBlock``...)."""
    import torch

    own = list(getattr(module, "_no_split_modules", None) or [])
    if own:
        return own
    found: list[str] = []
    for m in module.modules():
        if isinstance(m, (torch.nn.Sequential, torch.nn.ModuleList)):
            for child in m.children():
                name = type(child).__name__
                if list(child.children()) and not isinstance(child, torch.nn.Sequential) and name not in found:
                    found.append(name)
    return found


def accelerate_device_map(program, devices: Sequence[TorchDevice], strategy: str = "sequential"
                          ) -> dict[str, str]:
    """Accelerate's map of ``program.module``: submodule name -> device name.

    ``strategy`` is ``device_map``'s: ``sequential`` fills the accelerators in order;
    ``balanced`` first spreads the weights over them (``get_balanced_memory``; with one
    accelerator and its memory given, the same map). Caps of lower-precision devices are
    given to Accelerate in float32 bytes (it sizes the model as it is, in float32)."""
    import logging

    from accelerate import infer_auto_device_map
    from accelerate.utils import get_balanced_memory

    if strategy not in ("sequential", "balanced"):
        raise ValueError(f"unknown strategy {strategy!r}; sequential or balanced")
    # it warns that an index it is given is not a CUDA device here (cpu:bf16 standing in)
    logging.getLogger("accelerate.utils.modeling").setLevel(logging.ERROR)
    host = _host(devices)
    accel = [d for d in devices if d is not host]
    max_memory: dict = {i: int(d.mem_bytes * 4 / _BYTES.get(d.dtype, 4) if d.mem_bytes is not None
                               else UNCAPPED) for i, d in enumerate(accel)}
    max_memory["cpu"] = int(host.mem_bytes if host.mem_bytes is not None else UNCAPPED)
    no_split = no_split_classes(program.module)
    if strategy == "balanced":
        max_memory = get_balanced_memory(program.module, max_memory=max_memory,
                                         no_split_module_classes=no_split)
    raw = infer_auto_device_map(program.module, max_memory=max_memory,
                                no_split_module_classes=no_split)
    names = {i: d.name for i, d in enumerate(accel)}
    names["cpu"] = host.name
    out = {}
    for mod, dev in raw.items():
        if dev not in names:
            raise ValueError(f"Accelerate put {mod or 'the model'} on {dev!r}: the model does not "
                             "fit the devices' memory")
        out[mod] = names[dev]
    return out


def _module_path(node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return None
    path = list(stack.values())[-1][0]
    return path.replace("L['self'].", "").replace("L__self___", "")


def accelerate_placement(program, graph, devices: Sequence[TorchDevice], strategy: str = "sequential"
                         ) -> np.ndarray:
    """Accelerate's split (``strategy``: :func:`accelerate_device_map`) as a placement of
    ``graph``: one device index per node (the device most of the node's ops run on)."""
    dmap = accelerate_device_map(program, devices, strategy)
    index = {d.name: i for i, d in enumerate(devices)}
    default = dmap.get("", next(iter(dmap.values())))
    where: dict[str, str] = {}
    for n in program.gm.graph.nodes:
        if n.op in ("placeholder", "get_attr", "output"):
            continue
        path = _module_path(n)
        dev = None
        if path is not None:
            parts = path.split(".")
            for k in range(len(parts), -1, -1):
                key = ".".join(parts[:k])
                if key in dmap:
                    dev = dmap[key]
                    break
        if dev is None:
            first = next((a for a in n.all_input_nodes if a.name in where), None)
            dev = where[first.name] if first is not None else default
        where[n.name] = dev
    out = np.empty(graph.num_nodes, dtype=np.int64)
    for i, node in enumerate(graph.nodes):
        votes = Counter(where[op] for op in node.ops if op in where)
        out[i] = index[votes.most_common(1)[0][0] if votes else default]
    return out
