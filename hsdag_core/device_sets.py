"""Device sets drawn from families, and devices described by features instead of by position.

Every seed method's placer has one output per device of one fixed device list: it
cannot place on a set it was not trained on. A policy that can (GiPH, Hu et al.
2023) reads each device as a feature vector and scores (node, device) pairs, so
devices may come, go and differ in number. This module gives such a policy its
inputs and its training and held-out device sets:

* :class:`DeviceSet` and :func:`draw_device_set`: two to four modeled devices, a
  CPU-like host first, then accelerators of three kinds (GPU-like, NPU-like, a
  second CPU-like one) with speed drawn log-uniformly around the ready-made specs
  (:data:`~hsdag_core.device_profile.MODELED_DEVICES`) and weight memory unlimited or
  a fraction of the graph's weights, so the same set forces a split on a large graph
  and not on a small one. :data:`DEVICE_SET_SPLITS` fixes which seeds train and
  which are held out; the ``wide`` held-out split draws speeds and memory shares
  outside the training ranges (where a learned policy extrapolates).
* :func:`device_set_profile`: a graph's profile on a set (as
  :func:`hsdag_core.families.family_profile` makes one for a family graph).
* :func:`device_features` and :func:`pair_features`: what a device and a
  (node, device) pair look like to a policy, read from any
  :class:`~hsdag_core.costgraph.CostGraph` (modeled or measured profiles alike) and
  scale-free: times relative to the set's fastest device, memory relative to the
  graph's weights, links relative to the graph's mean node time.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Sequence

import numpy as np

from hsdag_core.costgraph import CostGraph

__all__ = ["DeviceSet", "draw_device_set", "device_sets", "device_set_profile", "device_features",
           "pair_features", "DEVICE_SET_SPLITS", "DEVICE_KINDS", "DEVICE_FEATURES", "PAIR_FEATURES",
           "DENSE_OPS"]

#: accelerator kinds a set draws from: name -> ready-made spec it scales
DEVICE_KINDS = {"GPU": "GPU_MODEL", "NPU": "NPU_MODEL", "CPU": "CPU_MODEL"}
#: op types whose time is dense math (the other ops are mostly memory-bound)
DENSE_OPS = frozenset({"Convolution", "GroupConvolution", "MatMul", "ConvolutionBackpropData",
                       "Einsum"})
#: speed factor range of a drawn device (log-uniform) around its kind's spec
SPEED_RANGE = (0.5, 2.0)
#: weight memory a memory-limited accelerator may hold, as a fraction of the graph's weights
MEMORY_FRACTIONS = (0.25, 0.5, 0.75)
#: the ``wide`` held-out split's ranges: speeds and memory shares never met in training
WIDE_SPEED_RANGE = (0.2, 5.0)
WIDE_MEMORY_FRACTIONS = (0.1, 0.15, 0.9)
#: the seeds of each split: training sets and held-out sets never overlap; ``wide`` sets
#: are held out and drawn from :data:`WIDE_SPEED_RANGE` and :data:`WIDE_MEMORY_FRACTIONS`
DEVICE_SET_SPLITS = {"train": range(0, 1000), "held_out": range(1000, 2000), "wide": range(2000, 3000)}
#: names of :func:`device_features`' columns
DEVICE_FEATURES = ("log_time_vs_fastest", "log_dense_vs_fastest", "log_other_vs_fastest",
                   "weight_share_held", "unlimited_memory", "log_link_vs_node", "num_devices")
#: names of :func:`pair_features`' columns
PAIR_FEATURES = ("log_time_vs_fastest", "time_share", "is_fastest", "weight_of_memory", "cannot_run")
#: cap on logarithmic and ratio features
_CAP = 10.0


@dataclass(frozen=True)
class DeviceSet:
    """Modeled devices: names, specs (``memory_bytes`` unused) and memory per device.

    Attributes:
        name: how tables name the set (``cpu+GPU(0.7x,mem 0.5)+NPU(1.3x)``).
        devices: device names, host first.
        specs: a :class:`~hsdag_core.device_profile.DeviceSpec` per device.
        memory_fraction: per device, the share of a graph's weights its memory holds
            (``inf``: unlimited).
    """

    name: str
    devices: tuple[str, ...]
    specs: tuple
    memory_fraction: tuple[float, ...]

    @property
    def size(self) -> int:
        return len(self.devices)


def draw_device_set(seed: int, sizes: Sequence[int] = (2, 3, 4), wide: bool = False) -> DeviceSet:
    """The device set of ``seed``: a host and ``size - 1`` accelerators (module docstring);
    ``wide``: speeds and memory shares from the ranges training never meets."""
    from hsdag_core.device_profile import MODELED_DEVICES

    rng = np.random.default_rng(seed)
    size = int(rng.choice(list(sizes)))
    speeds, fractions = (WIDE_SPEED_RANGE, WIDE_MEMORY_FRACTIONS) if wide else (SPEED_RANGE, MEMORY_FRACTIONS)

    def speed() -> float:
        lo, hi = np.log(speeds)
        if wide:  # outside the training range: below or above it
            lo, hi = (lo, np.log(SPEED_RANGE[0])) if rng.random() < 0.5 else (np.log(SPEED_RANGE[1]), hi)
        return float(np.exp(rng.uniform(lo, hi)))

    h = speed()
    names, specs, mems, labels = ["HOST"], [MODELED_DEVICES["CPU_MODEL"].scaled(h)], [np.inf], [f"cpu({h:.1f}x)"]
    kinds = list(DEVICE_KINDS)
    for k in range(1, size):
        kind = kinds[int(rng.choice(3, p=[0.5, 0.3, 0.2]))]
        s = speed()
        mem = float(rng.choice(fractions)) if kind == "GPU" and rng.random() < 0.7 else np.inf
        names.append(f"{kind}{k}")
        specs.append(MODELED_DEVICES[DEVICE_KINDS[kind]].scaled(s))
        mems.append(mem)
        labels.append(f"{kind.lower()}({s:.1f}x" + (f",mem {mem:.2f})" if np.isfinite(mem) else ")"))
    return DeviceSet("+".join(labels), tuple(names), tuple(specs), tuple(mems))


def device_sets(split: str, count: int, sizes: Sequence[int] = (2, 3, 4)) -> list[DeviceSet]:
    """The first ``count`` sets of ``split`` (``train``, ``held_out`` or ``wide``)."""
    if split not in DEVICE_SET_SPLITS:
        raise ValueError(f"unknown device-set split {split!r}; choose {' or '.join(DEVICE_SET_SPLITS)}")
    seeds = DEVICE_SET_SPLITS[split]
    if count > len(seeds):
        raise ValueError(f"split {split} has {len(seeds)} sets, not {count}")
    return [draw_device_set(s, sizes, wide=split == "wide") for s in seeds[:count]]


def device_set_profile(graph, devset: DeviceSet, boundary_s: float = 1e-4):
    """The profile of ``graph`` (a :class:`~hsdag_core.compgraph.CompGraph`) on ``devset``:
    modeled times per device, each accelerator's link, memory for its share of the
    graph's weights, and ``boundary_s`` per stage boundary (the families' 0.1 ms)."""
    from hsdag_core.device_profile import Profile, add_modeled_device

    weights = float(sum(nd.weight_bytes for nd in graph.nodes))
    prof = Profile(model=graph.name, devices={}, op_time_s={})
    for name, spec, frac in zip(devset.devices, devset.specs, devset.memory_fraction):
        mem = max(frac * weights, 1.0) if np.isfinite(frac) else np.inf
        add_modeled_device(prof, graph, name, replace(spec, memory_bytes=mem))
    prof.boundary_s = boundary_s
    return prof


def _finite(t: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(t), t, np.nan)


def _log_vs_fastest(total: np.ndarray) -> np.ndarray:
    """``log(total / min(total))`` over devices, capped; 0 where nothing runs."""
    best = np.nanmin(total) if np.isfinite(total).any() and np.nanmin(total) > 0 else 1.0
    out = np.log(np.maximum(total, 1e-30) / best)
    return np.clip(np.nan_to_num(out, nan=_CAP, posinf=_CAP), 0.0, _CAP)


def device_features(costs: CostGraph, op_types: Optional[Sequence[str]] = None) -> np.ndarray:
    """``[D, len(DEVICE_FEATURES)]`` float32: each device of ``costs`` as a policy sees it.

    Columns (:data:`DEVICE_FEATURES`): the log of the graph's time on the device over
    the fastest device's, the same for dense ops (:data:`DENSE_OPS`) and for the other
    ops alone (the device's speed per kind of op), the share of the graph's weights its
    memory holds (1 when unlimited or larger) and whether it is unlimited, the log of its
    mean transfer time per tensor over the graph's mean node time on the fastest device,
    and the number of devices in the set (divided by 4).
    """
    t = _finite(np.asarray(costs.compute_s, dtype=np.float64))
    n, d = t.shape
    kinds = list(op_types if op_types is not None else (costs.op_types or [""] * n))
    dense = np.array([k in DENSE_OPS for k in kinds], dtype=bool)
    total = np.nansum(t, 0)
    cols = [_log_vs_fastest(total)]
    for part in (dense, ~dense):
        cols.append(_log_vs_fastest(np.nansum(t[part], 0)) if part.any() else np.zeros(d))
    weights = float(np.sum(costs.mem_bytes))
    cap = np.asarray(costs.mem_capacity, dtype=np.float64)
    held = np.where(np.isfinite(cap), np.minimum(cap / max(weights, 1.0), 1.0), 1.0)
    cols += [held, (~np.isfinite(cap)).astype(np.float64)]
    node_s = max(np.nanmin(total) / max(n, 1), 1e-12)
    if costs.num_tensors:
        lat, bw = np.asarray(costs.link_latency_s), np.asarray(costs.link_bandwidth_Bps)
        mean_bytes = float(np.mean(costs.tensor_bytes))
        off = ~np.eye(d, dtype=bool)
        pair_s = np.where(off, lat + mean_bytes / bw, np.nan)
        link = np.nanmean(pair_s, 1) if d > 1 else np.zeros(d)
    else:
        link = np.zeros(d)
    cols.append(np.clip(np.log1p(np.nan_to_num(link, nan=0.0) / node_s), 0.0, _CAP))
    cols.append(np.full(d, d / 4.0))
    return np.stack(cols, 1).astype(np.float32)


def pair_features(costs: CostGraph) -> np.ndarray:
    """``[n, D, len(PAIR_FEATURES)]`` float32: every (node, device) pair of ``costs``.

    Columns (:data:`PAIR_FEATURES`): the log of the node's time on the device over its
    time on its fastest device; the node's time there over the graph's mean node time on
    the set's fastest device (``log1p``); whether the device is the node's fastest; the
    node's weights over the device's memory (0 when unlimited, capped); whether the
    device cannot run the node.
    """
    raw = np.asarray(costs.compute_s, dtype=np.float64)
    t = _finite(raw)
    n, d = t.shape
    fastest = np.nanmin(t, 1, keepdims=True) if n else np.ones((0, 1))
    fastest = np.where(np.isfinite(fastest) & (fastest > 0), fastest, 1e-12)
    ratio = np.clip(np.nan_to_num(np.log(np.maximum(t, 1e-30) / fastest), nan=_CAP), 0.0, _CAP)
    node_s = max(float(np.nanmin(np.nansum(t, 0))) / max(n, 1), 1e-12)
    share = np.clip(np.log1p(np.nan_to_num(t / node_s, nan=0.0)), 0.0, _CAP)
    is_fastest = (ratio <= 1e-9).astype(np.float64)
    cap = np.asarray(costs.mem_capacity, dtype=np.float64)
    mem = np.asarray(costs.mem_bytes, dtype=np.float64)[:, None]
    of_memory = np.where(np.isfinite(cap)[None], np.minimum(mem / np.maximum(cap, 1.0)[None], _CAP), 0.0)
    cannot = (~np.isfinite(raw)).astype(np.float64)
    return np.stack([ratio, share, is_fastest, of_memory, cannot], 2).astype(np.float32)
