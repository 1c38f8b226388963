"""A placement of a :class:`~hsdag_core.torch_graph.TorchProgram` cut into stages and run.

The ATen graph's nodes, in graph order, are cut wherever the device of a compute node
changes (the stage boundaries the simulator counts); ``getitem`` nodes go with the op
they read, and ops computed from parameters alone with their first consumer.
Each stage becomes a ``GraphModule`` of its own nodes (:class:`Staged` runs them in order,
handing values on by node name); a stage depends on its node set alone, so
:class:`StageCache` keeps built stages for the next placement that has them. Each stage runs on its device in its precision
(:class:`OnDevice`): tensors arriving from another device are copied at the stage's
entrance (host to GPU without blocking the host; GPU to host waits for the data), and
parameters are moved once per device by :class:`TensorCache`, never per inference.
"""
from __future__ import annotations

import operator
from collections import OrderedDict
from typing import Mapping, Optional

import torch
from torch import nn

from envs.pytorch.devices import TorchDevice

__all__ = ["OnDevice", "TensorCache", "StageCache", "Staged", "retarget", "stage_of_nodes", "build_placed",
           "to_host", "weight_bytes_per_device"]


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
        self.threads = device.threads
        self.device_name = device.name
        self.lock = None
        self.shared = False  # held by a StageCache, so shared with other placements

    def _move(self, x):
        if not isinstance(x, torch.Tensor):
            return x
        dtype = self.dtype if x.is_floating_point() else x.dtype
        if x.device == self.device and x.dtype == dtype:
            return x
        return x.to(self.device, dtype, non_blocking=self.non_blocking and x.device.type == "cpu")

    def forward(self, *args):
        if self.threads is not None:  # the device's own intra-op threads while it runs
            before = torch.get_num_threads()
            torch.set_num_threads(self.threads)
            try:
                return self._run(args)
            finally:
                torch.set_num_threads(before)
        return self._run(args)

    def _run(self, args):
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


class Staged(nn.Module):
    """A placement's stages run in order: each reads the program's inputs and earlier
    stages' outputs by fx node name, and the program's outputs are gathered at the end."""

    def __init__(self, gm, stages: list[OnDevice], plan: list[tuple[list[str], list[str]]]) -> None:
        super().__init__()
        self.stages = nn.ModuleList(stages)
        self.plan = plan
        self.gm = [gm]  # not a submodule: its parameters stay where they are
        self.inputs = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        self.output = next(n for n in gm.graph.nodes if n.op == "output").args[0]

    def forward(self, *args):
        env = dict(zip(self.inputs, args))
        for stage, (ins, outs) in zip(self.stages, self.plan):
            env.update(zip(outs, stage(*(env[i] for i in ins))))
        return torch.fx.node.map_arg(
            self.output, lambda n: env[n.name] if n.name in env else _attr(self.gm[0], n.target))


def _stage(gm, nodes: list, device: TorchDevice, cache: "TensorCache") -> tuple[OnDevice, list[str], list[str]]:
    """One stage: the ``nodes`` (graph order) as a GraphModule on ``device``, the names of
    the values it reads from outside and of those it hands on. Both follow from the node
    set alone, so a stage is the same in every placement that has it."""
    names = {n.name for n in nodes}
    graph, root = torch.fx.Graph(), nn.Module()
    env: dict[str, torch.fx.Node] = {}
    ins: list[str] = []

    def outside(a: torch.fx.Node) -> torch.fx.Node:
        if a.name not in env:
            if a.op == "get_attr":  # a parameter: its copy on this device, held by the stage
                attr = "p_" + a.target.replace(".", "_")
                root.register_buffer(attr, cache.get(a.target, _attr(gm, a.target), device),
                                     persistent=False)
                env[a.name] = graph.get_attr(attr)
            else:
                ins.append(a.name)
                env[a.name] = graph.placeholder(a.name)
        return env[a.name]

    for n in nodes:
        for a in n.all_input_nodes:
            if a.name not in names:
                outside(a)
        copy = graph.node_copy(n, lambda a: env[a.name])
        if copy.op == "call_function" and copy.kwargs:
            copy.kwargs = retarget(copy.kwargs, device)
        env[n.name] = copy
    outs = [n.name for n in nodes if any(u.name not in names for u in n.users)]
    graph.output(tuple(env[o] for o in outs))
    return OnDevice(torch.fx.GraphModule(root, graph), device), ins, outs


class StageCache:
    """Built stages kept between placements, keyed by device and node set, so a placement
    that shares stages with an earlier one builds only its new stages. Stages on a device
    with a memory cap are not kept: their parameter copies must leave with their placement.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._stages: "OrderedDict[tuple, tuple[OnDevice, list[str], list[str]]]" = OrderedDict()
        self.hits = self.misses = 0

    def get(self, gm, nodes: list, device: TorchDevice, cache: "TensorCache"):
        if self.size <= 0 or device.mem_bytes is not None:
            return _stage(gm, nodes, device, cache)
        key = (device.name, tuple(n.name for n in nodes))
        hit = self._stages.get(key)
        if hit is not None:
            self.hits += 1
            self._stages.move_to_end(key)
            return hit
        self.misses += 1
        built = _stage(gm, nodes, device, cache)
        built[0].shared = True
        self._stages[key] = built
        while len(self._stages) > self.size:
            self._stages.popitem(last=False)
        return built

    def clear(self) -> None:
        self._stages.clear()


def build_placed(gm, affinity: Mapping[str, str], devices: Mapping[str, TorchDevice],
                 cache: TensorCache, stages: Optional["StageCache"] = None) -> tuple[nn.Module, list[str]]:
    """The placed program of ``affinity``: a module taking the program's inputs (on the
    host) and returning its outputs where the last stages leave them, and the stages'
    device names in run order. Stages come from ``stages`` where it holds them."""
    stage, order = stage_of_nodes(gm, affinity)
    members: list[list] = [[] for _ in order]
    for n in gm.graph.nodes:
        if n.name in stage:
            members[stage[n.name]].append(n)
    # copies the placement does not use leave a capped device before any new one arrives
    needed = {(a.target, devices[order[k]].name) for k, nodes in enumerate(members)
              for n in nodes for a in n.all_input_nodes if a.op == "get_attr"}
    cache.keep(needed, {d.name for d in devices.values() if d.mem_bytes is not None})
    stages = stages or StageCache(0)
    built = [stages.get(gm, nodes, devices[order[k]], cache) for k, nodes in enumerate(members)]
    return Staged(gm, [b[0] for b in built], [(b[1], b[2]) for b in built]), order


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

