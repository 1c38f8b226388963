"""A placement of a :class:`~hsdag_core.torch_graph.TorchProgram` cut into stages and run.

The ATen graph's nodes, in graph order, are cut wherever the device of a compute node
changes (the stage boundaries the simulator counts); ``getitem`` nodes go with the op
they read, and ops computed from parameters alone with their first consumer.
``torch.fx.passes.split_module`` turns the stages into one sub-``GraphModule`` each; the
top-level module calls them in order. Each stage runs on its device in its precision
(:class:`OnDevice`): tensors arriving from another device are copied at the stage's
entrance (host to GPU without blocking the host; GPU to host waits for the data), and
parameters are moved once per device by :class:`TensorCache`, never per inference.
"""
from __future__ import annotations

import operator
from typing import Mapping

import torch
from torch import nn

from envs.pytorch.devices import TorchDevice

__all__ = ["OnDevice", "TensorCache", "retarget", "stage_of_nodes", "build_placed", "to_host",
           "weight_bytes_per_device"]


class OnDevice(nn.Module):
    """A stage that runs on ``device``: its floating inputs are moved there (and cast to
    the device's precision) on the way in. With a ``lock`` (pipelined inference,
    :mod:`envs.pytorch.pipelined`) the stage holds it while it runs, on a GPU until its
    work is done, so that one stage at a time uses the device."""

    def __init__(self, stage: nn.Module, device: TorchDevice) -> None:
        super().__init__()
        self.stage = stage
        self.device = device.torch_device
        self.dtype = device.torch_dtype
        self.non_blocking = device.is_cuda
        self.device_name = device.name
        self.lock = None

    def _move(self, x):
        if not isinstance(x, torch.Tensor):
            return x
        dtype = self.dtype if x.is_floating_point() else x.dtype
        if x.device == self.device and x.dtype == dtype:
            return x
        return x.to(self.device, dtype, non_blocking=self.non_blocking and x.device.type == "cpu")

    def forward(self, *args):
        if self.lock is None:
            return self.stage(*(self._move(a) for a in args))
        with self.lock:
            out = self.stage(*(self._move(a) for a in args))
            if self.non_blocking:
                torch.cuda.current_stream(self.device).synchronize()
            return out


class TensorCache:
    """Parameters and buffers of a program copied to a device once: ``get(name, tensor,
    device)`` returns the copy on that device in its precision. ``keep(needed)`` drops the
    copies a placement does not use on devices with a memory cap, so a capped GPU holds
    only what the placement puts there."""

    def __init__(self) -> None:
        self._copies: dict[tuple[str, str], torch.Tensor] = {}

    def get(self, name: str, tensor: torch.Tensor, device: TorchDevice) -> torch.Tensor:
        key = (name, device.name)
        hit = self._copies.get(key)
        if hit is None:
            dtype = device.torch_dtype if tensor.is_floating_point() else tensor.dtype
            hit = tensor.detach().to(device.torch_device, dtype)
            self._copies[key] = hit
        return hit

    def keep(self, needed: set[tuple[str, str]], capped: set[str]) -> None:
        for key in [k for k in self._copies if k[1] in capped and k not in needed]:
            del self._copies[key]

    def clear(self) -> None:
        self._copies.clear()


def retarget(kwargs: Mapping, device: TorchDevice) -> dict:
    """An op's keyword arguments made for ``device``: a tensor the op creates (``device=``,
    e.g. an attention mask or positions built inside ``forward``) is created there, and in
    a half-precision stage a floating ``dtype=`` is the stage's precision."""
    out = dict(kwargs)
    if isinstance(out.get("device"), torch.device):
        out["device"] = device.torch_device
    dt = out.get("dtype")
    if device.dtype != "float32" and isinstance(dt, torch.dtype) and dt.is_floating_point:
        out["dtype"] = device.torch_dtype
    return out


def _retarget_graph(module: nn.Module, device: TorchDevice) -> None:
    graph = getattr(module, "graph", None)
    if graph is None:
        return
    changed = False
    for n in graph.nodes:
        if n.op == "call_function" and n.kwargs:
            new = retarget(n.kwargs, device)
            if new != dict(n.kwargs):
                n.kwargs = new
                changed = True
    if changed:
        module.recompile()


def stage_of_nodes(gm, affinity: Mapping[str, str]) -> tuple[dict[str, int], list[str]]:
    """Each fx node's stage and each stage's device name, for ``affinity`` (fx node name
    -> device name, covering every compute node). Stages are numbered in graph order, so a
    stage reads only from earlier ones."""
    order = [n for n in gm.graph.nodes if n.op not in ("placeholder", "get_attr", "output")]
    stage: dict[str, int] = {}
    devices: list[str] = []
    for n in order:
        if n.target is operator.getitem or n.name not in affinity:
            continue
        dev = affinity[n.name]
        if not devices or devices[-1] != dev:
            devices.append(dev)
        stage[n.name] = len(devices) - 1
    for n in order:  # getitem: its producer's stage
        if n.target is operator.getitem and n.args[0].name in stage:
            stage[n.name] = stage[n.args[0].name]
    for n in reversed(order):  # ops of parameters alone, unnamed ops: their first consumer's stage
        if n.name not in stage:
            users = [stage[u.name] for u in n.users if u.name in stage]
            stage[n.name] = min(users) if users else max(len(devices) - 1, 0)
    if not devices:
        devices = [next(iter(affinity.values()))]
    return stage, devices


def build_placed(gm, affinity: Mapping[str, str], devices: Mapping[str, TorchDevice],
                 cache: TensorCache) -> tuple[nn.Module, list[str]]:
    """The placed program of ``affinity``: a module taking the program's inputs (on the
    host) and returning its outputs where the last stages leave them, and the stages'
    device names in run order."""
    from torch.fx.passes.split_module import split_module

    stage, order = stage_of_nodes(gm, affinity)
    split = split_module(gm, gm, lambda n: stage[n.name], keep_original_order=True)
    graph = split.graph
    params: dict[str, torch.Tensor] = {}
    calls = [n for n in graph.nodes if n.op == "call_module" and n.target.startswith("submod_")]
    # copies the placement does not use leave a capped device before any new one arrives
    needed = {(a.target, devices[order[int(c.target.split("_")[-1])]].name)
              for c in calls for a in c.args if isinstance(a, torch.fx.Node) and a.op == "get_attr"}
    cache.keep(needed, {d.name for d in devices.values() if d.mem_bytes is not None})
    for call in calls:
        k = int(call.target.split("_")[-1])
        dev = devices[order[k]]
        stage_module = getattr(split, call.target)
        _retarget_graph(stage_module, dev)
        setattr(split, call.target, OnDevice(stage_module, dev))
        new_args = []
        for a in call.args:
            if isinstance(a, torch.fx.Node) and a.op == "get_attr":
                attr = f"_on_{dev.name.replace(':', '_')}_{a.target.replace('.', '_')}"
                if attr not in params:
                    params[attr] = cache.get(a.target, _attr(gm, a.target), dev)
                    split.register_buffer(attr, params[attr], persistent=False)
                with graph.inserting_before(call):
                    a = graph.get_attr(attr)
            new_args.append(a)
        call.args = tuple(new_args)
    for n in [n for n in graph.nodes if n.op == "get_attr" and not n.users]:
        graph.erase_node(n)
    split.recompile()
    return split, order


def _attr(module, target: str) -> torch.Tensor:
    for part in target.split("."):
        module = getattr(module, part)
    return module


def to_host(outputs) -> list[torch.Tensor]:
    """The outputs as float32 (or their own integer type) tensors on the host."""
    outs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    return [o.to("cpu", torch.float32 if o.is_floating_point() else o.dtype) for o in outs
            if isinstance(o, torch.Tensor)]


def weight_bytes_per_device(gm, affinity: Mapping[str, str],
                            devices: Mapping[str, TorchDevice]) -> dict[str, float]:
    """Bytes of the parameters each device holds under ``affinity`` (a parameter read on
    two devices counts on both), in the device's precision."""
    stage, order = stage_of_nodes(gm, affinity)
    out: dict[str, float] = {}
    for n in gm.graph.nodes:
        if n.op != "get_attr":
            continue
        t = _attr(gm, n.target)
        devs = {order[stage[u.name]] for u in n.users if u.name in stage}
        for d in devs:
            size = devices[d].torch_dtype.itemsize if t.is_floating_point() else t.element_size()
            out[d] = out.get(d, 0.0) + float(t.numel() * size)
    return out

