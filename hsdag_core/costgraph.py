"""The numeric placement problem: a DAG of nodes with per-device costs.

A :class:`CostGraph` is what the simulator, the exact solvers and the learned
methods' reward model share. It knows nothing of OpenVINO: it is built from a
:class:`hsdag_core.compgraph.CompGraph` plus a profile (:mod:`hsdag_core.device_profile`), or
loaded from the public dnn-partitioning benchmark format
(:mod:`hsdag_core.dnnpart`).

Conventions (every consumer relies on them):

* Nodes are indexed ``0..n-1`` **in a topological order**; the order is also the
  order in which stages are formed for the ``sequential`` objective.
* Data flows through *tensors*. A tensor has one producer (``tensor_src``) and
  one or more consumers; there is one edge per (tensor, consuming node) pair.
  Sending a tensor to another device costs its transfer time **once per
  destination device**, whatever the number of consumers there.
* A placement is an ``int`` array of shape ``[n]`` holding a device index per
  node (``devices[p[i]]`` is the OpenVINO device name).
* Times are seconds, sizes bytes. ``compute_s[i, d] = inf`` means node ``i``
  cannot run on device ``d``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

__all__ = ["CostGraph", "InvalidCostGraph", "EVENT_ORDERS", "restrict_devices"]

#: how the parallel objective orders ops ready at the same time (CostGraph.event_order)
EVENT_ORDERS = ("index", "doppler")


class InvalidCostGraph(ValueError):
    """Raised when a cost graph's arrays are inconsistent."""


@dataclass
class CostGraph:
    """A placement problem: nodes, tensors, per-device costs and limits.

    Attributes:
        names: node names, unique, in topological order. For graphs built
            from OpenVINO these are the nodes' primary friendly names.
        devices: device names (OpenVINO names such as ``CPU``, ``GPU``, or
            the names of virtual / modeled devices).
        compute_s: ``[n, D]`` execution time of each node on each device.
        tensor_src: ``[T]`` producing node of each tensor.
        tensor_bytes: ``[T]`` size of each tensor in bytes.
        edge_src, edge_dst, edge_tensor: ``[m]`` one edge per
            (tensor, consumer) pair; ``edge_src[e] == tensor_src[edge_tensor[e]]``.
        link_latency_s: ``[D, D]`` fixed cost of one transfer between devices.
        link_bandwidth_Bps: ``[D, D]`` bytes per second between devices.
        tensor_transfer_s: optional ``[T]`` explicit transfer time of each tensor
            over any link (the dnn-partitioning format gives one); when set it
            replaces the latency/bandwidth model.
        boundary_s: cost of every stage boundary in the ``sequential``
            objective (stage start-up, broken fusions, layout conversions).
        mem_bytes: ``[n]`` memory a node needs on its device (weights etc.).
        mem_capacity: ``[D]`` memory of each device (``inf`` = unlimited).
        colocate: optional ``[n]`` class ids; nodes of one class must share a
            device (``-1`` = no constraint).
        is_backward: optional ``[n]`` bool, training graphs' backward nodes.
        op_types: optional ``[n]`` op type names, for features and display.
        modeled: device name -> True when that device's costs come from a spec
            (estimated), False when measured.
        name: a label for reports.
        event_order: how the ``parallel`` objective orders ops that become ready on
            one device at the same time: ``"index"`` (by topological index) or
            ``"doppler"`` (the order of DOPPLER's simpy simulator, for its graphs:
            :mod:`hsdag_core.doppler`).
        time_tick_s: when set, every time of the graph is a whole number of these
            seconds, and the ``parallel`` objective adds times in whole ticks (exact
            ties, as DOPPLER's integer times have).
    """

    names: list[str]
    devices: list[str]
    compute_s: np.ndarray
    tensor_src: np.ndarray
    tensor_bytes: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_tensor: np.ndarray
    link_latency_s: Optional[np.ndarray] = None
    link_bandwidth_Bps: Optional[np.ndarray] = None
    tensor_transfer_s: Optional[np.ndarray] = None
    boundary_s: float = 0.0
    mem_bytes: Optional[np.ndarray] = None
    mem_capacity: Optional[np.ndarray] = None
    colocate: Optional[np.ndarray] = None
    is_backward: Optional[np.ndarray] = None
    op_types: Optional[list[str]] = None
    modeled: dict[str, bool] = field(default_factory=dict)
    name: str = "graph"
    event_order: str = "index"
    time_tick_s: Optional[float] = None

    def __post_init__(self) -> None:
        n, D = len(self.names), len(self.devices)
        self.compute_s = np.asarray(self.compute_s, dtype=np.float64).reshape(n, D)
        self.tensor_src = np.asarray(self.tensor_src, dtype=np.int64)
        self.tensor_bytes = np.asarray(self.tensor_bytes, dtype=np.float64)
        self.edge_src = np.asarray(self.edge_src, dtype=np.int64)
        self.edge_dst = np.asarray(self.edge_dst, dtype=np.int64)
        self.edge_tensor = np.asarray(self.edge_tensor, dtype=np.int64)
        if self.link_latency_s is None:
            self.link_latency_s = np.zeros((D, D))
        if self.link_bandwidth_Bps is None:
            self.link_bandwidth_Bps = np.full((D, D), np.inf)
        self.link_latency_s = np.asarray(self.link_latency_s, dtype=np.float64)
        self.link_bandwidth_Bps = np.asarray(self.link_bandwidth_Bps, dtype=np.float64)
        if self.tensor_transfer_s is not None:
            self.tensor_transfer_s = np.asarray(self.tensor_transfer_s, dtype=np.float64)
        self.mem_bytes = (np.zeros(n) if self.mem_bytes is None
                          else np.asarray(self.mem_bytes, dtype=np.float64))
        self.mem_capacity = (np.full(D, np.inf) if self.mem_capacity is None
                             else np.asarray(self.mem_capacity, dtype=np.float64))
        if self.colocate is not None:
            self.colocate = np.asarray(self.colocate, dtype=np.int64)
        if self.is_backward is not None:
            self.is_backward = np.asarray(self.is_backward, dtype=bool)
        self.validate()

    # ------------------------------------------------------------------ sizes
    @property
    def num_nodes(self) -> int:
        return len(self.names)

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    @property
    def num_tensors(self) -> int:
        return len(self.tensor_src)

    # ------------------------------------------------------------- validation
    def validate(self) -> None:
        """Check shapes, index ranges and that node order is topological."""
        n, D, T = self.num_nodes, self.num_devices, self.num_tensors
        if len(set(self.names)) != n:
            raise InvalidCostGraph("node names must be unique")
        if D == 0:
            raise InvalidCostGraph("a cost graph needs at least one device")
        m = len(self.edge_src)
        if not (len(self.edge_dst) == len(self.edge_tensor) == m):
            raise InvalidCostGraph("edge_src, edge_dst and edge_tensor must have the same length")
        if len(self.tensor_bytes) != T:
            raise InvalidCostGraph("tensor_bytes must have one entry per tensor")
        if T and (self.tensor_src.min() < 0 or self.tensor_src.max() >= n):
            raise InvalidCostGraph("tensor_src holds a node index out of range")
        if m:
            if self.edge_dst.min() < 0 or self.edge_dst.max() >= n:
                raise InvalidCostGraph("edge_dst holds a node index out of range")
            if self.edge_tensor.min() < 0 or self.edge_tensor.max() >= T:
                raise InvalidCostGraph("edge_tensor holds a tensor index out of range")
            if not np.array_equal(self.edge_src, self.tensor_src[self.edge_tensor]):
                raise InvalidCostGraph("edge_src must equal the producer of edge_tensor")
            if np.any(self.edge_src >= self.edge_dst):
                raise InvalidCostGraph(
                    "nodes must be indexed in topological order (every edge from a lower "
                    "to a higher index)")
        for arr, shape, what in ((self.link_latency_s, (D, D), "link_latency_s"),
                                 (self.link_bandwidth_Bps, (D, D), "link_bandwidth_Bps"),
                                 (self.mem_bytes, (n,), "mem_bytes"),
                                 (self.mem_capacity, (D,), "mem_capacity")):
            if arr.shape != shape:
                raise InvalidCostGraph(f"{what} must have shape {shape}, not {arr.shape}")
        if self.tensor_transfer_s is not None and self.tensor_transfer_s.shape != (T,):
            raise InvalidCostGraph("tensor_transfer_s must have one entry per tensor")
        if self.colocate is not None and self.colocate.shape != (n,):
            raise InvalidCostGraph("colocate must have one entry per node")
        if np.any(np.isnan(self.compute_s)) or np.any(self.compute_s < 0):
            raise InvalidCostGraph("compute_s must be non-negative (inf = unsupported)")
        if self.event_order not in EVENT_ORDERS:
            raise InvalidCostGraph(f"event_order must be one of {', '.join(EVENT_ORDERS)}, "
                                   f"not {self.event_order!r}")
        if self.time_tick_s is not None and not self.time_tick_s > 0:
            raise InvalidCostGraph("time_tick_s must be positive (or None)")

    # ------------------------------------------------------------- transfers
    def transfer_s(self) -> np.ndarray:
        """``[T, D, D]`` time to send each tensor from one device to another.

        Zero on the diagonal (no transfer within a device).
        """
        D = self.num_devices
        if self.tensor_transfer_s is not None:
            out = np.repeat(self.tensor_transfer_s[:, None, None], D, axis=1).repeat(D, axis=2)
        else:
            with np.errstate(divide="ignore", invalid="ignore"):
                per_byte = np.where(np.isinf(self.link_bandwidth_Bps), 0.0,
                                    1.0 / self.link_bandwidth_Bps)
            out = self.link_latency_s[None] + self.tensor_bytes[:, None, None] * per_byte[None]
        idx = np.arange(D)
        out[:, idx, idx] = 0.0
        return out

    # ------------------------------------------------------------ placements
    def device_index(self, device: str) -> int:
        try:
            return self.devices.index(device)
        except ValueError:
            raise KeyError(f"unknown device {device!r}; this graph has {self.devices}") from None

    def placement_from_names(self, placement: dict[str, str]) -> np.ndarray:
        """Turn ``{node name: device name}`` into a device-index array.

        Raises ``KeyError`` naming the first node without a device or the first
        unknown device.
        """
        out = np.empty(self.num_nodes, dtype=np.int64)
        for i, nm in enumerate(self.names):
            if nm not in placement:
                raise KeyError(f"the placement has no device for node {nm!r}")
            out[i] = self.device_index(placement[nm])
        return out

    def placement_to_names(self, placement: Sequence[int]) -> dict[str, str]:
        p = np.asarray(placement, dtype=np.int64)
        return {nm: self.devices[int(d)] for nm, d in zip(self.names, p)}

    def single_device(self, device: int | str) -> np.ndarray:
        d = self.device_index(device) if isinstance(device, str) else int(device)
        return np.full(self.num_nodes, d, dtype=np.int64)

    def memory_use(self, placement: Sequence[int]) -> np.ndarray:
        """``[D]`` bytes placed on each device."""
        p = np.asarray(placement, dtype=np.int64)
        return np.bincount(p, weights=self.mem_bytes, minlength=self.num_devices)

    def colocation_ok(self, placement: Sequence[int]) -> bool:
        if self.colocate is None:
            return True
        p = np.asarray(placement, dtype=np.int64)
        cls = self.colocate
        mask = cls >= 0
        if not mask.any():
            return True
        _, inv = np.unique(cls[mask], return_inverse=True)
        first = np.full(inv.max() + 1, -1, dtype=np.int64)
        first[inv[::-1]] = p[mask][::-1]
        return bool(np.all(first[inv] == p[mask]))

    def subgraph_summary(self) -> str:
        return (f"{self.name}: {self.num_nodes} nodes, {len(self.edge_src)} edges, "
                f"{self.num_tensors} tensors, devices {self.devices}")


def restrict_devices(graph: CostGraph, keep: Sequence[int]) -> CostGraph:
    """The same problem on the devices ``keep`` only (in that order)."""
    k = np.asarray(keep, dtype=np.int64)
    return CostGraph(
        names=list(graph.names), devices=[graph.devices[i] for i in k],
        compute_s=graph.compute_s[:, k], tensor_src=graph.tensor_src,
        tensor_bytes=graph.tensor_bytes, edge_src=graph.edge_src, edge_dst=graph.edge_dst,
        edge_tensor=graph.edge_tensor, link_latency_s=graph.link_latency_s[np.ix_(k, k)],
        link_bandwidth_Bps=graph.link_bandwidth_Bps[np.ix_(k, k)],
        tensor_transfer_s=graph.tensor_transfer_s, boundary_s=graph.boundary_s,
        mem_bytes=graph.mem_bytes, mem_capacity=graph.mem_capacity[k],
        colocate=graph.colocate, is_backward=graph.is_backward, op_types=graph.op_types,
        modeled={d: graph.modeled.get(d, False) for d in (graph.devices[i] for i in k)},
        name=graph.name, event_order=graph.event_order, time_tick_s=graph.time_tick_s)
