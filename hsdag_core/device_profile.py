"""Profiles: per-op times per device, transfer and stage-boundary costs.

A profile is what turns a :class:`~hsdag_core.compgraph.CompGraph` into a
:class:`~hsdag_core.costgraph.CostGraph` the simulator and the solvers use.
It is a JSON file, recorded once on real devices and used anywhere::

    python -m hsdag_ray.profile --model resnet50 --devices CPU,CPU_F32 --out r50.json
    python -m hsdag_ray.profile --model bert_base --devices CPU --modeled GPU_MODEL --out b.json

(recorded by :func:`envs.profiling.record`).

Per-op times come from OpenVINO's own profiling (``enable_profiling``) on each
real device; ops OpenVINO fused away get 0. A device can instead be
*modeled* from a :class:`DeviceSpec` (peak FLOP/s, memory bandwidth, per-op
overhead): its time per node is ``max(flops / peak, bytes / bandwidth) +
overhead``, and the profile marks it ``"kind": "modeled"``. Next to a measured
host, the ready-made specs (:data:`MODELED_DEVICES`) are scaled to that host
(:func:`host_scale`, recorded as ``host_scale``), so a modeled accelerator is
as much faster than your CPU as its spec is than :data:`REFERENCE_HOST`.

Transfers cost ``latency + bytes / bandwidth`` per tensor and destination
device; each stage boundary costs ``boundary_s``. Both are fitted by
non-negative least squares to real measurements of a few split placements
when two real devices are profiled (:func:`envs.profiling.fit_link_costs`).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Mapping, Optional, Sequence

import numpy as np

from hsdag_core.costgraph import CostGraph
from hsdag_core.compgraph import CompGraph, GraphError

__all__ = ["DeviceSpec", "Profile", "MODELED_DEVICES", "REFERENCE_HOST", "cost_graph",
           "modeled_op_times", "add_modeled_device", "host_scale", "default_boundary_s",
           "split_placements"]


@dataclass(frozen=True)
class DeviceSpec:
    """A device described by numbers instead of measured.

    Attributes:
        peak_flops: sustained FLOP/s on dense ops.
        mem_bandwidth_Bps: bytes/s between the device and its memory.
        op_overhead_s: fixed cost of launching one node.
        memory_bytes: device memory for weights (``inf`` = unlimited).
        link_bandwidth_Bps / link_latency_s: the host link, used for
            transfers from and to this device.
    """

    peak_flops: float
    mem_bandwidth_Bps: float
    op_overhead_s: float = 0.0
    memory_bytes: float = float("inf")
    link_bandwidth_Bps: float = 16e9
    link_latency_s: float = 20e-6

    def scaled(self, h: float) -> "DeviceSpec":
        """The same device ``h`` times faster in everything: math, memory,
        launches and its link (memory size unchanged)."""
        return replace(self, peak_flops=self.peak_flops * h, mem_bandwidth_Bps=self.mem_bandwidth_Bps * h,
                       op_overhead_s=self.op_overhead_s / h, link_bandwidth_Bps=self.link_bandwidth_Bps * h,
                       link_latency_s=self.link_latency_s / h)


#: ready-made modeled devices (names usable wherever a device is named)
MODELED_DEVICES: dict[str, DeviceSpec] = {
    # an integrated-GPU-like accelerator: fast dense math, a launch cost per op
    "GPU_MODEL": DeviceSpec(peak_flops=2.0e12, mem_bandwidth_Bps=60e9, op_overhead_s=30e-6,
                            link_bandwidth_Bps=8e9, link_latency_s=50e-6),
    # the same accelerator with 64 MB of memory for weights: large models must split
    "GPU_SMALLMEM": DeviceSpec(peak_flops=2.0e12, mem_bandwidth_Bps=60e9, op_overhead_s=30e-6,
                               memory_bytes=64e6, link_bandwidth_Bps=8e9, link_latency_s=50e-6),
    # the same accelerator with 32 MB: beside GPU_SMALLMEM, two accelerators that differ
    # only in memory, which together still cannot hold a large model
    "GPU_TINYMEM": DeviceSpec(peak_flops=2.0e12, mem_bandwidth_Bps=60e9, op_overhead_s=30e-6,
                              memory_bytes=32e6, link_bandwidth_Bps=8e9, link_latency_s=50e-6),
    # an NPU-like accelerator: dense math 10x a CPU's, half its memory bandwidth and a
    # launch cost per op, so memory-bound ops (embeddings, gathers, normalisations) may run
    # faster on the CPU and the optimum splits by the kind of op, not by memory size
    "NPU_MODEL": DeviceSpec(peak_flops=1.0e12, mem_bandwidth_Bps=10e9, op_overhead_s=40e-6,
                            link_bandwidth_Bps=8e9, link_latency_s=20e-6),
    # a CPU-like device, for modeling a CPU without measuring it
    "CPU_MODEL": DeviceSpec(peak_flops=1.0e11, mem_bandwidth_Bps=20e9, op_overhead_s=5e-6,
                            link_bandwidth_Bps=16e9, link_latency_s=5e-6),
}

#: the CPU the ready-made specs are written against. Next to a measured host
#: CPU, a ready-made modeled device is scaled to it (:func:`host_scale`): it is
#: to the host what its spec is to ``CPU_MODEL``, so a run has the same shape
#: (which split is optimal, by how much) on a slow CPU and on one with AMX.
REFERENCE_HOST = "CPU_MODEL"

#: one stage boundary on the reference host (fitted on ResNet-50 splits of two
#: CPU devices on a host 2.4x faster than ``CPU_MODEL``: about 0.5 ms)
REFERENCE_BOUNDARY_S = 1.2e-3


@dataclass
class Profile:
    """Per-op times on each device plus the link and boundary model.

    Attributes:
        model: the model the times belong to.
        devices: device name -> ``{"kind": "measured"|"modeled", ...}`` details.
        op_time_s: device name -> {op friendly name -> seconds}.
        link_latency_s / link_bandwidth_Bps: transfer model for every pair of
            distinct devices (``pairs`` may override one pair, key ``"A->B"``).
        boundary_s: cost of each stage boundary.
        mem_capacity: device name -> bytes (missing = unlimited).
        fit: how the link and boundary costs were fitted (figures).
        source: the graph the op names belong to: ``openvino`` (OpenVINO friendly names) or
            ``torch`` (fx node names of the ``torch.export`` graph), so a simulator run on
            the profile builds the same graph.
    """

    model: str
    devices: dict[str, dict]
    op_time_s: dict[str, dict[str, float]]
    link_latency_s: float = 0.0
    link_bandwidth_Bps: float = float("inf")
    pairs: dict[str, dict[str, float]] = field(default_factory=dict)
    boundary_s: float = 0.0
    mem_capacity: dict[str, float] = field(default_factory=dict)
    fit: dict = field(default_factory=dict)
    source: str = "openvino"

    @property
    def device_names(self) -> list[str]:
        return list(self.devices)

    def is_modeled(self, device: str) -> bool:
        return self.devices.get(device, {}).get("kind") == "modeled"

    # ------------------------------------------------------------------ json
    def to_json(self) -> dict:
        d = asdict(self)
        d["link_bandwidth_Bps"] = None if np.isinf(self.link_bandwidth_Bps) else self.link_bandwidth_Bps
        d["mem_capacity"] = {k: (None if np.isinf(v) else v) for k, v in self.mem_capacity.items()}
        return d

    @classmethod
    def from_json(cls, d: Mapping, source: str = "the profile") -> "Profile":
        """The profile ``d`` holds, every number checked (:meth:`check`); a
        :class:`GraphError` naming ``source`` (e.g. ``"profile r50.json"``) when it is not one."""
        if not isinstance(d, Mapping):
            raise GraphError(f"{source} holds a JSON {_json_kind(d)}, not a profile (an object with "
                             "model, devices and op_time_s); record one with python -m hsdag_ray.profile")
        try:
            p = cls(model=str(d["model"]), devices=dict(d["devices"]),
                    op_time_s={k: dict(v) for k, v in d["op_time_s"].items()},
                    link_latency_s=float(d.get("link_latency_s") or 0.0),
                    link_bandwidth_Bps=float(d["link_bandwidth_Bps"])
                    if d.get("link_bandwidth_Bps") is not None else float("inf"),
                    pairs=dict(d.get("pairs") or {}), boundary_s=float(d.get("boundary_s") or 0.0),
                    mem_capacity={k: float("inf") if v is None else float(v)
                                  for k, v in (d.get("mem_capacity") or {}).items()},
                    fit=dict(d.get("fit") or {}), source=str(d.get("source") or "openvino"))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            what = f"no {e}" if isinstance(e, KeyError) else str(e)
            raise GraphError(f"{source} is not a profile written by hsdag_core.device_profile ({what}); "
                             "record one with python -m hsdag_ray.profile") from None
        missing = [dev for dev in p.devices if dev not in p.op_time_s]
        if missing:
            raise GraphError(f"{source} has no op times for device {missing[0]}; record it again "
                             "with python -m hsdag_ray.profile")
        p.check(source)
        return p

    def check(self, source: str = "the profile") -> None:
        """Refuse a number no device can have: a :class:`GraphError` naming ``source``, the
        field and the op, device or pair, for an op time, latency, boundary cost or memory
        size that is not a finite number >= 0, or a bandwidth that is not > 0 (``inf``, no
        limit, is allowed for bandwidths and memory sizes). ``fit`` (figures of how the
        costs were fitted) is not checked."""
        def bad(field: str, value, positive: bool = False, unlimited: bool = False) -> None:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                why = f"is {value!r}, not a number"
            else:
                v = float(value)
                if v != v or (v == float("inf") and not unlimited) or v == float("-inf"):
                    why = f"is {v}, not a finite number"
                elif v < 0 or (positive and v == 0):
                    why = f"is {v:g}"
                else:
                    return
            need = "> 0" if positive else ">= 0"
            raise GraphError(f"{source}: {field} {why}; it must be a{' finite' if not unlimited else ''} "
                             f"number {need}" + (" (null for no limit)" if unlimited else "")
                             + "; fix the file or record it again with python -m hsdag_ray.profile")

        for dev, info in self.devices.items():
            if not isinstance(info, Mapping):
                raise GraphError(f"{source}: devices[{dev!r}] is {info!r}, not an object like "
                                 '{"kind": "measured"}; record it again with python -m hsdag_ray.profile')
            if "host_scale" in info:
                bad(f"host_scale of device {dev}", info["host_scale"], positive=True)
            spec = info.get("spec")
            if isinstance(spec, Mapping):
                for k, v in spec.items():
                    bad(f"spec {k} of device {dev}", v,
                        positive=k in ("peak_flops", "mem_bandwidth_Bps", "link_bandwidth_Bps"),
                        unlimited=k in ("memory_bytes", "link_bandwidth_Bps"))
        for dev, times in self.op_time_s.items():
            for op, t in times.items():
                bad(f"op_time_s of op {op!r} on device {dev}", t)
        bad("link_latency_s", self.link_latency_s)
        bad("link_bandwidth_Bps", self.link_bandwidth_Bps, positive=True, unlimited=True)
        bad("boundary_s", self.boundary_s)
        for pair, link in self.pairs.items():
            if not isinstance(link, Mapping) or "latency_s" not in link or "bandwidth_Bps" not in link:
                raise GraphError(f"{source}: pairs[{pair!r}] is {link!r}, not an object with latency_s "
                                 "and bandwidth_Bps; record it again with python -m hsdag_ray.profile")
            bad(f"latency_s of pair {pair}", link["latency_s"])
            bad(f"bandwidth_Bps of pair {pair}", link["bandwidth_Bps"], positive=True, unlimited=True)
        for dev, cap in self.mem_capacity.items():
            bad(f"mem_capacity of device {dev}", cap, unlimited=True)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> "Profile":
        path = Path(path)
        if not path.is_file():
            raise GraphError(f"profile file {path} does not exist; record one with "
                             "python -m hsdag_ray.profile")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise GraphError(f"profile {path} is not valid JSON ({e.msg} at line {e.lineno})") from None
        except (OSError, UnicodeDecodeError) as e:
            raise GraphError(f"cannot read profile {path} ({e}); give a profile JSON written by "
                             "python -m hsdag_ray.profile") from None
        return cls.from_json(data, source=f"profile {path}")


def _json_kind(value) -> str:
    """What JSON calls ``value``'s type (``array`` for a list)."""
    return {list: "array", str: "string", int: "number", float: "number", bool: "boolean",
            type(None): "null"}.get(type(value), type(value).__name__)


# ================================================================ modeling
def modeled_op_times(graph: CompGraph, spec: DeviceSpec) -> dict[str, float]:
    """Per-op times of ``graph`` on a modeled device.

    The whole node's time (roofline + overhead) is given to its main op, the
    node's other ops (constants, parameters) get 0.
    """
    out: dict[str, float] = {}
    for n in graph.nodes:
        t = max(n.flops / spec.peak_flops, (n.bytes_read + n.bytes_written) / spec.mem_bandwidth_Bps)
        out[n.ops[0]] = t + spec.op_overhead_s
        for op in n.ops[1:]:
            out.setdefault(op, 0.0)
    return out


def host_scale(profile: Profile, graph: CompGraph, host: str) -> float:
    """How many times faster the measured device ``host`` runs ``graph`` than
    :data:`REFERENCE_HOST` would (summed per-op times)."""
    measured = sum(profile.op_time_s[host].get(op, 0.0) for n in graph.nodes for op in n.ops)
    reference = sum(modeled_op_times(graph, MODELED_DEVICES[REFERENCE_HOST]).values())
    if measured <= 0:
        raise GraphError(f"the profile has no op times on {host}; cannot scale modeled devices to it")
    return reference / measured


def default_boundary_s(profile: Profile) -> float:
    """The cost of one stage boundary when none was fitted: the reference
    host's, scaled like the profile's modeled devices (unscaled without any)."""
    scales = [d["host_scale"] for d in profile.devices.values() if "host_scale" in d]
    return REFERENCE_BOUNDARY_S / (scales[0] if scales else 1.0)


def add_modeled_device(profile: Profile, graph: CompGraph, name: str,
                       spec: Optional[DeviceSpec] = None, relative_to: Optional[str] = None) -> None:
    """Add a modeled device (``spec`` or a name of :data:`MODELED_DEVICES`).

    With ``relative_to`` (a measured device of ``profile``) the spec is scaled
    by :func:`host_scale`, and the profile records the scale."""
    if spec is None:
        if name not in MODELED_DEVICES:
            raise GraphError(f"unknown modeled device {name!r}; choose one of "
                             f"{', '.join(MODELED_DEVICES)}")
        spec = MODELED_DEVICES[name]
    info: dict = {"kind": "modeled"}
    if relative_to is not None:
        h = host_scale(profile, graph, relative_to)
        spec = spec.scaled(h)
        info.update(relative_to=relative_to, host_scale=h)
    profile.devices[name] = {**info, "spec": asdict(spec)}
    profile.op_time_s[name] = modeled_op_times(graph, spec)
    if np.isfinite(spec.memory_bytes):
        profile.mem_capacity[name] = spec.memory_bytes
    for other in profile.devices:
        if other != name:
            link = {"latency_s": spec.link_latency_s, "bandwidth_Bps": spec.link_bandwidth_Bps}
            profile.pairs[f"{other}->{name}"] = link
            profile.pairs[f"{name}->{other}"] = link


def cost_graph(graph: CompGraph, profile: Profile, devices: Optional[Sequence[str]] = None) -> CostGraph:
    """The numeric placement problem of ``graph`` under ``profile``.

    A node's time on a device is the sum of its ops' profiled times (ops the
    profile does not list, e.g. fused away, count 0). Memory per node is its
    weight bytes.
    """
    devices = list(devices or profile.device_names)
    unknown = [d for d in devices if d not in profile.devices]
    if unknown:
        raise GraphError(f"device {unknown[0]} is not in the profile (it has "
                         f"{', '.join(profile.device_names)}); record it with python -m hsdag_ray.profile")
    covered = set().union(*(profile.op_time_s[d].keys() for d in devices))
    if not any(op in covered for n in graph.nodes for op in n.ops):
        raise GraphError(f"the profile (model {profile.model!r}) names none of the ops of "
                         f"{graph.name!r}: it was recorded for another model")
    n, D = graph.num_nodes, len(devices)
    compute = np.zeros((n, D))
    for k, d in enumerate(devices):
        times = profile.op_time_s[d]
        compute[:, k] = [sum(times.get(op, 0.0) for op in node.ops) for node in graph.nodes]
    tensors, of_edge = graph.tensors()
    tbytes = np.zeros(len(tensors))
    for e, t in zip(graph.edges, of_edge):
        tbytes[t] = e.bytes
    lat = np.full((D, D), profile.link_latency_s)
    bw = np.full((D, D), profile.link_bandwidth_Bps)
    for a, da in enumerate(devices):
        for b, db in enumerate(devices):
            pair = profile.pairs.get(f"{da}->{db}")
            if pair:
                lat[a, b], bw[a, b] = pair["latency_s"], pair["bandwidth_Bps"]
    np.fill_diagonal(lat, 0.0)
    np.fill_diagonal(bw, np.inf)
    return CostGraph(
        names=graph.names, devices=devices, compute_s=compute,
        tensor_src=np.array([s for s, _ in tensors], dtype=np.int64), tensor_bytes=tbytes,
        edge_src=np.array([e.src for e in graph.edges], dtype=np.int64),
        edge_dst=np.array([e.dst for e in graph.edges], dtype=np.int64), edge_tensor=of_edge,
        link_latency_s=lat, link_bandwidth_Bps=bw, boundary_s=profile.boundary_s,
        mem_bytes=np.array([node.weight_bytes for node in graph.nodes]),
        mem_capacity=np.array([profile.mem_capacity.get(d, np.inf) for d in devices]),
        op_types=[node.op_type for node in graph.nodes],
        modeled={d: profile.is_modeled(d) for d in devices}, name=graph.name,
        **_event_order(profile))


def _event_order(profile: Profile) -> dict:
    """A DOPPLER profile's cost graph keeps DOPPLER's event order and integer ticks (its
    link moves one byte per tick: :func:`hsdag_core.doppler.doppler_profile`)."""
    if profile.source != "doppler":
        return {}
    return {"event_order": "doppler", "time_tick_s": 1.0 / profile.link_bandwidth_Bps}


# ================================================================= fitting
def split_placements(n: int, num_devices: int = 2, count: int = 12, seed: int = 0) -> list[np.ndarray]:
    """Placements of several kinds for fitting and fidelity checks.

    Contiguous two-way splits at evenly spaced cut points (both directions),
    block placements alternating every ``b`` nodes, and random per-node ones,
    in roughly equal shares.
    """
    rng = np.random.default_rng(seed)
    out: list[np.ndarray] = []
    k = max(1, count // 3)
    for c in np.linspace(0, n, k + 2)[1:-1].astype(int):
        p = np.zeros(n, dtype=np.int64)
        p[c:] = 1
        out.append(p if len(out) % 2 == 0 else 1 - p)
    for b in np.unique(np.geomspace(4, max(5, n // 2), k).astype(int)):
        out.append((np.arange(n) // b) % num_devices)
    while len(out) < count:
        out.append(rng.integers(0, num_devices, n))
    return out[:count]
