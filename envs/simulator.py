"""A fast cost-model simulator of placements, behind the measurement interface.

Four objectives, all in seconds (lower is better):

``sequential``
    What OpenVINO HETERO does: stages run one after another. The value is
    ``sum_i compute[i, p_i]`` + the transfer time of every tensor sent to
    another device (once per tensor and destination device) + ``boundary_s``
    times the number of stage boundaries, a boundary being a pair of
    consecutive nodes (in the graph's topological order) on different devices.
``parallel``
    Devices run concurrently (as in Placeto's simulator): event-driven list
    scheduling where each device runs one node at a time, a node becomes
    ready when all its input tensors have arrived (producer finish + transfer,
    once per tensor and destination device; links have no contention), and a
    device runs its ready nodes first-come first-served (ties by topological
    index, or in DOPPLER's simpy event order for a graph whose ``event_order`` is
    ``"doppler"``: :mod:`envs.doppler_order`). The value is the makespan.
``throughput``
    Pipelined inference as in Tarnawski et al. (NeurIPS 2020): the time per
    sample of the pipeline is the maximum device load, a device's load being
    the compute time of its nodes plus the transfer time of every tensor it
    sends or receives (each crossing counted on both ends).
``latency``
    The latency model of Tarnawski et al. (:mod:`envs.call_latency`): CPUs
    unlimited, each accelerator runs its nodes as one call paying its inputs, its
    summed compute and its outputs; the graph contracted by accelerator must stay
    acyclic. The value is the latest end of any node.

Every objective also checks device memory (``mem_bytes`` summed per device
against ``mem_capacity``), devices a node cannot run on (``inf`` compute) and
co-location classes; a placement breaking one is infeasible and the simulator
says which limit it broke.
"""
from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field
from typing import Literal, Mapping, NamedTuple, Sequence, get_args

import numpy as np

from envs.base import Backend, Measurement
from envs.call_latency import CallLatency
from hsdag_core.costgraph import CostGraph
from hsdag_core.fit import violation

__all__ = ["OBJECTIVES", "SimResult", "Schedule", "Simulator", "SimulatorBackend"]

#: what a placement's measurement minimises (:class:`Simulator` measures each)
Objective = Literal["sequential", "parallel", "throughput", "latency"]
OBJECTIVES: tuple[str, ...] = get_args(Objective)


@dataclass
class SimResult:
    """Value of one placement under one objective.

    ``value`` is the objective in seconds (``inf`` when a node sits on a
    device that cannot run it). ``feasible`` is False when a memory limit,
    an unsupported device or a co-location class is broken; ``violation``
    then says which, in one sentence. ``breakdown`` splits the value into its
    parts (compute, transfer, boundary, stages; per-device load for
    ``throughput``).
    """

    value: float
    feasible: bool = True
    violation: str | None = None
    breakdown: dict[str, float] = field(default_factory=dict)


class Schedule(NamedTuple):
    """A list schedule of the ``parallel`` objective: per node ``start`` and
    ``finish`` ``[n]`` (seconds), per device ``busy`` ``[D]`` time, and the number
    of (tensor, destination device) transfers."""

    start: np.ndarray
    finish: np.ndarray
    busy: np.ndarray
    crossings: int


class Simulator:
    """Evaluates placements of one :class:`CostGraph`.

    Construction precomputes the per-tensor transfer times and adjacency; an
    evaluation is then a few vectorised numpy operations (``sequential``,
    ``throughput``) or one pass of list scheduling (``parallel``).
    """

    def __init__(self, graph: CostGraph) -> None:
        self.graph = graph
        self.transfer = graph.transfer_s()  # [T, D, D]
        g = graph
        # consumers of each node in CSR form, for the list scheduler
        order = np.argsort(g.edge_src, kind="stable")
        self._succ_ptr = np.zeros(g.num_nodes + 1, dtype=np.int64)
        np.add.at(self._succ_ptr, g.edge_src + 1, 1)
        self._succ_ptr = np.cumsum(self._succ_ptr)
        self._succ_dst = g.edge_dst[order]
        self._succ_tensor = g.edge_tensor[order]
        self._indeg = np.bincount(g.edge_dst, minlength=g.num_nodes)
        if g.event_order == "doppler":
            from envs.doppler_order import ticks

            # a tensor's time to any other device (DOPPLER's graphs have one per tensor)
            off = self.transfer[:, 0, 1] if g.num_devices > 1 else np.zeros(g.num_tensors)
            self._doppler_send = ticks(off, g.time_tick_s)
        self._calls: CallLatency | None = None

    # ----------------------------------------------------------- feasibility
    def check(self, placement: np.ndarray) -> str | None:
        """One sentence on the first limit ``placement`` breaks, or None
        (:func:`hsdag_core.fit.violation`)."""
        return violation(self.graph, placement)

    # ------------------------------------------------------------ transfers
    def crossings(self, placement: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Distinct (tensor, destination device) pairs that cross devices."""
        g = self.graph
        p = placement
        dst_dev = p[g.edge_dst]
        cross = dst_dev != p[g.edge_src]
        if not cross.any():
            e = np.empty(0, dtype=np.int64)
            return e, e
        key = np.unique(g.edge_tensor[cross] * g.num_devices + dst_dev[cross])
        return key // g.num_devices, key % g.num_devices

    # ----------------------------------------------------------- objectives
    def sequential(self, placement: np.ndarray) -> SimResult:
        g = self.graph
        p = placement
        compute = float(g.compute_s[np.arange(g.num_nodes), p].sum())
        t, d = self.crossings(p)
        transfer = float(self.transfer[t, p[g.tensor_src[t]], d].sum())
        boundaries = int(np.count_nonzero(p[1:] != p[:-1]))
        value = compute + transfer + g.boundary_s * boundaries
        return SimResult(value, breakdown={
            "compute_s": compute, "transfer_s": transfer,
            "boundary_s": g.boundary_s * boundaries, "stages": float(boundaries + 1),
            "crossings": float(t.size)})

    def throughput(self, placement: np.ndarray) -> SimResult:
        g = self.graph
        p = placement
        D = g.num_devices
        load = np.bincount(p, weights=g.compute_s[np.arange(g.num_nodes), p], minlength=D)
        comm = self.device_transfers(p)
        total = load + comm
        bd = {f"load_{g.devices[k]}_s": float(total[k]) for k in range(D)}
        bd["transfer_s"] = float(comm.sum() / 2)  # each transfer loads its sender and receiver
        return SimResult(float(total.max()), breakdown=bd)

    def device_transfers(self, placement: np.ndarray) -> np.ndarray:
        """The transfer time each device sends or receives under ``placement`` (its
        communication load under ``throughput``)."""
        g, p, D = self.graph, placement, self.graph.num_devices
        t, d = self.crossings(p)
        src_dev = p[g.tensor_src[t]]
        cost = self.transfer[t, src_dev, d]
        return np.bincount(src_dev, weights=cost, minlength=D) + np.bincount(d, weights=cost, minlength=D)

    def parallel(self, placement: np.ndarray) -> SimResult:
        g = self.graph
        costs = g.compute_s[np.arange(g.num_nodes), placement]
        if not np.isfinite(costs).all():  # a node on a device that cannot run it
            return SimResult(float("inf"))
        sched = self._list_schedule(placement)
        makespan = float(sched.finish.max()) if g.num_nodes else 0.0
        bd = {f"busy_{g.devices[k]}_s": float(sched.busy[k]) for k in range(g.num_devices)}
        bd["crossings"] = float(sched.crossings)
        return SimResult(makespan, breakdown=bd)

    @property
    def calls(self) -> CallLatency:
        """The ``latency`` objective's evaluator (built on first use)."""
        if self._calls is None:
            self._calls = CallLatency(self.graph)
        return self._calls

    def latency(self, placement: np.ndarray) -> SimResult:
        value, broken, bd, _ = self.calls.evaluate(placement)
        return SimResult(value, broken is None, broken, bd)

    def _list_schedule(self, placement: np.ndarray) -> Schedule:
        """The event-driven list schedule of the ``parallel`` objective (in DOPPLER's
        event order for a graph whose ``event_order`` says so: :mod:`envs.doppler_order`)."""
        g = self.graph
        if g.event_order == "doppler":
            from envs.doppler_order import doppler_schedule

            return Schedule(*doppler_schedule(self, placement))
        p = placement.tolist()
        n, D = g.num_nodes, g.num_devices
        cost = g.compute_s[np.arange(n), placement].tolist()
        transfer = self.transfer
        ptr, succ, succ_t = self._succ_ptr.tolist(), self._succ_dst.tolist(), self._succ_tensor.tolist()
        remaining = self._indeg.tolist()
        ready = [0.0] * n
        start = [0.0] * n
        finish = [0.0] * n
        free = [0.0] * D
        busy = [0.0] * D
        queues: list[list[tuple[float, int]]] = [[] for _ in range(D)]
        for i in range(n):
            if remaining[i] == 0:
                heapq.heappush(queues[p[i]], (0.0, i))
        # arrival time of (tensor, device) pairs already sent
        arrival: dict[int, float] = {}
        scheduled = 0
        while scheduled < n:
            best_d, best_start = -1, float("inf")
            for d in range(D):
                if queues[d]:
                    s = max(free[d], queues[d][0][0])
                    if s < best_start:
                        best_d, best_start = d, s
            if best_d < 0:
                raise RuntimeError("the graph has a cycle: list scheduling stalled")
            _, i = heapq.heappop(queues[best_d])
            f = best_start + cost[i]
            start[i] = best_start
            finish[i] = f
            free[best_d] = f
            busy[best_d] += cost[i]
            scheduled += 1
            pi = p[i]
            for k in range(ptr[i], ptr[i + 1]):
                j = succ[k]
                pj = p[j]
                if pj == pi:
                    a = f
                else:
                    key = succ_t[k] * D + pj
                    a = arrival.get(key)
                    if a is None:
                        a = f + float(transfer[succ_t[k], pi, pj])
                        arrival[key] = a
                if a > ready[j]:
                    ready[j] = a
                remaining[j] -= 1
                if remaining[j] == 0:
                    heapq.heappush(queues[pj], (ready[j], j))
        return Schedule(np.asarray(start), np.asarray(finish), np.asarray(busy), len(arrival))

    def start_times(self, placement: Sequence[int] | np.ndarray,
                    objective: str = "sequential") -> np.ndarray:
        """``[n]`` time (seconds) each node starts in the schedule ``objective`` describes.

        ``sequential``: nodes run one after another in index (topological)
        order; node ``i`` starts after every earlier node's compute, every stage
        boundary up to and including its own (``boundary_s`` each) and every
        transfer whose first consumer on its destination device has index
        ``<= i``, so the last node's start plus its compute is the sequential
        value. ``parallel``: the list schedule's start times (the makespan is
        the latest finish). ``latency``: each node's end less its own compute
        (an accelerator's nodes all end with its call). ``throughput`` (a pipeline,
        no single schedule): zeros. Nodes on a device that cannot run them make the times ``inf``
        from there on (sequential) or all ``inf`` (parallel).
        """
        g = self.graph
        p = np.asarray(placement, dtype=np.int64)
        if p.shape != (g.num_nodes,):
            raise ValueError(f"a placement needs one device per node ({g.num_nodes}), "
                             f"got shape {p.shape}")
        if objective == "throughput" or g.num_nodes == 0:
            return np.zeros(g.num_nodes)
        cost = g.compute_s[np.arange(g.num_nodes), p]
        if objective == "parallel":
            if not np.isfinite(cost).all():
                return np.full(g.num_nodes, np.inf)
            return self._list_schedule(p).start
        if objective == "latency":
            return self.calls.evaluate(p)[3] - cost
        if objective != "sequential":
            raise ValueError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
        # waits that happen just before node i: its stage boundary and the transfers it is
        # the first consumer of (per tensor and destination device)
        before = np.zeros(g.num_nodes)
        before[1:] += g.boundary_s * (p[1:] != p[:-1])
        dst_dev = p[g.edge_dst]
        cross = dst_dev != p[g.edge_src]
        if cross.any():
            key = g.edge_tensor[cross] * g.num_devices + dst_dev[cross]
            first = np.full(int(key.max()) + 1, g.num_nodes, dtype=np.int64)
            np.minimum.at(first, key, g.edge_dst[cross])
            used = np.unique(key)
            t, d = used // g.num_devices, used % g.num_devices
            np.add.at(before, first[used], self.transfer[t, p[g.tensor_src[t]], d])
        done = np.concatenate([[0.0], np.cumsum(cost)[:-1]])
        return done + np.cumsum(before)

    def evaluate(self, placement: Sequence[int] | np.ndarray, objective: str = "sequential") -> SimResult:
        """Value of ``placement`` (device index per node) under ``objective``."""
        if objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
        p = np.asarray(placement, dtype=np.int64)
        if p.shape != (self.graph.num_nodes,):
            raise ValueError(f"a placement needs one device per node ({self.graph.num_nodes}), "
                             f"got shape {p.shape}")
        if p.size and (p.min() < 0 or p.max() >= self.graph.num_devices):
            raise ValueError("a placement holds a device index out of range")
        res = getattr(self, objective)(p)
        violation = self.check(p)
        if violation is None and not res.feasible:
            violation = res.violation
        if violation is not None:
            res.feasible = False
            res.violation = violation
        return res


class SimulatorBackend(Backend):
    """The simulator behind the :class:`envs.base.Backend` interface."""

    simulated = True

    def __init__(self, graph: CostGraph, objective: str = "sequential") -> None:
        if objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
        self.sim = Simulator(graph)
        self.objective = objective
        self.devices = list(graph.devices)
        self.name = f"simulator/{objective}"

    def measure_array(self, placement: np.ndarray, race: bool = False) -> Measurement:
        t0 = time.perf_counter()
        res = self.sim.evaluate(placement, self.objective)
        info = dict(res.breakdown)
        info["eval_s"] = time.perf_counter() - t0
        if not res.feasible:
            stage = "memory" if "memory" in (res.violation or "") else "validate"
            if stage == "memory":
                info["memory_over"] = self.memory_over(placement)
            return Measurement.failure(self.name, stage, res.violation or "infeasible", **info)
        return Measurement(ok=True, latency_s=res.value, spread=0.0, runs=1,
                           backend=self.name, samples_s=[res.value], info=info)

    def memory_over(self, placement: np.ndarray) -> float:
        """How far ``placement`` is over the devices' memory: the sum over devices
        of the bytes above capacity, as a fraction of that capacity (0 if it fits)."""
        g = self.sim.graph
        use = g.memory_use(np.asarray(placement))
        cap = g.mem_capacity
        limited = np.isfinite(cap) & (cap > 0)
        return float((np.maximum(use[limited] - cap[limited], 0.0) / cap[limited]).sum())

    def measure(self, placement: Mapping[str, str], race: bool = False) -> Measurement:
        try:
            p = self.sim.graph.placement_from_names(placement)
        except KeyError as e:
            return Measurement.failure(self.name, "validate", str(e.args[0]))
        return self.measure_array(p)


class TimedSimulatorBackend(SimulatorBackend):
    """The simulator taking a fixed ``delay_s`` per measurement, like a real device
    would: what scaling benchmarks and multi-machine tests measure with (a run on it
    pins its measuring actors to measuring machines as a real one does)."""

    def __init__(self, graph: CostGraph, objective: str = "sequential", delay_s: float = 0.1) -> None:
        super().__init__(graph, objective)
        self.delay_s = float(delay_s)
        self.name = f"simulator/{objective}/timed"

    def measure_array(self, placement: np.ndarray, race: bool = False) -> Measurement:
        time.sleep(self.delay_s)
        return super().measure_array(placement)
