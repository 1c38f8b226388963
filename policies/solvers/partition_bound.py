"""A lower bound on the sequential objective over the whole graph: the Dantzig-Wolfe
relaxation of the split into device-sized node sets, by column generation
(:func:`partition_bound`).

A placement is a partition of the nodes into sets, one per device used. Where a tensor's
transfer time does not depend on the pair of devices (every dnn-partitioning input), the
sequential objective is a sum over those sets: each set pays its nodes' compute on its
device and every tensor it receives from outside once. Where it depends on the pair, a
set is charged the least time of each tensor it receives from any other device, which
the placement pays at least. So the optimum is (at least) the set partitioning program::

    min sum_S c_S lambda_S,   sum_{S containing v} lambda_S >= 1   (every node v),
                              sum_{S of class k} lambda_S <= n_k   (n_k devices of class k),

over every set ``S`` a device of class ``k`` can hold (within its memory, supporting its
nodes, co-located nodes together), and its LP relaxation bounds it from below. It is
strong where the MILP's relaxation is weak: a set's transfers are paid in full by the
set, so spreading a node over identical accelerators in equal fractions saves nothing.
Covering a node more than once (``>= 1``) only loosens the program, and keeps its duals
non-negative, which steadies the column generation.

The sets are too many to list. Column generation starts from the incumbent's sets and
every interval of the topological order that fits a device (with the nodes co-located
with it), and adds the sets of negative reduced cost that a MILP over the nodes finds
(HiGHS; each improving solution of its branch and bound): with node prices ``pi``, the
least ``c_S - pi(S)`` for class ``k`` is a minimum cut with a knapsack row. Whatever ``pi >= 0``,
Lagrange's bound ``sum_v pi_v + sum_k n_k min(0, min_S c_S - pi(S))`` is at most the optimum,
so the bound holds at any moment, not only at the end; it uses each pricing MILP's own
dual bound, so a pricing stopped early stays valid. Prices are smoothed towards the best
found so far (Wentges), the usual remedy for the oscillating duals of a degenerate master.
The master LP keeps only the columns that may enter its basis soon, the pool all of them
(:mod:`policies.solvers.partition_master`); the restricted master heuristic
(:mod:`policies.solvers.master_heuristic`) turns the pool into placements.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, NamedTuple, Optional

import highspy
import numpy as np

from envs.simulator import Simulator
from hsdag_core.costgraph import CostGraph
from policies.solvers.bounds import lower_bound
from policies.solvers.highs_model import Model
from policies.solvers.master_heuristic import restricted_master_ip
from policies.solvers.partition_master import Master
from policies.solvers.result import (colocation_groups, device_classes,
                                    redundant_for_sequential, uniform_transfer)

__all__ = ["partition_bound", "THREADS", "HEURISTIC_FROM", "HEURISTIC_RUN", "HEURISTIC_SHARE", "INTERVAL_MAX",
           "PRICING_OPTIONS", "SMOOTHING", "STOP_GAP"]

THREADS = 1
"""HiGHS's threads for each program of the bound (the master LP, the pricing MILPs, the
restricted master heuristic's IPs): they are small and solved one after another, beside
HiGHS's branch and bound, and a worker of their own would take a core from it (on two
cores, 56 against 61 iterations in 60 s on inceptionv3). So the column generation runs
in a thread of its own, whose HiGHS scheduler has this many threads
(:func:`policies.solvers.highs_model.new_highs`).

The price is process-wide: after a HiGHS run on one thread, in any thread, HiGHS's later
branch and bounds in the process run without their concurrent search, whatever their own
``threads`` (efficientnet_b2 on eight accelerators: proven in 1 s, 19-21 s after such a
run; ``resetGlobalScheduler`` does not undo it), so a process that solves several inputs
one after another pays for it in HiGHS's own proofs (docs/results/solvers.md)."""

HEURISTIC_FROM = 0.25
"""The restricted master heuristic first runs once this share of the time limit has
passed: before, the columns are mostly the first intervals."""

HEURISTIC_SHARE = 0.1
"""The share of the time the restricted master heuristic takes: after a run, the next
waits until the column generation has spent ``(1 - share) / share`` times its seconds."""

HEURISTIC_RUN = 0.05
"""The most seconds of one run of the restricted master heuristic, as a share of the time
limit (the run stops sooner where its next program is expected to pass it)."""

INTERVAL_MAX = 64
"""The first columns hold every interval of the topological order that fits a device,
of at most this many nodes (a device of unlimited memory would otherwise take every one)."""

SMOOTHING = 0.8
"""Wentges's smoothing: prices are this share of the best prices so far plus the rest of
the master's duals; where they give no column the master can use, the master's own
duals are priced too."""

STOP_GAP = 1e-5
"""The column generation stops once its bound is within this share of the incumbent's
value or of the master's (converged)."""

PRICING_OPTIONS = {
    "mip_heuristic_run_feasibility_jump": False, "mip_heuristic_run_rens": False,
    "mip_heuristic_run_rins": False, "mip_heuristic_run_root_reduced_cost": False,
    "mip_heuristic_run_shifting": False, "mip_heuristic_run_zi_round": False,
    "mip_pscost_minreliable": 0,
}
"""HiGHS options of the pricing MILPs. They are small and solved many times, and their
optimum is what counts, not a first good solution: HiGHS's primal heuristics spend time
without changing the optimum the branch and bound proves, and strong branching to make
pseudo-costs reliable costs more than the nodes it saves on these problems. The time
goes to more iterations of the column generation (docs/results/solvers.md)."""


class _Class(NamedTuple):
    """Interchangeable devices: those used, memory, compute and each tensor's transfer
    into them (scaled)."""
    devices: list[int]
    cap: float
    cost: np.ndarray
    tr: np.ndarray

    @property
    def count(self) -> int:
        return len(self.devices)


def _classes(g: CostGraph, scale: float) -> list[_Class]:
    """The device classes, each tensor's transfer into a class the least from any other
    device (where it depends on the pair, a set pays at least that for each tensor it
    receives, whichever device sends it)."""
    unused = set(redundant_for_sequential(g))
    uni = uniform_transfer(g)
    full = g.transfer_s() if uni is None else None
    out = []
    for cls in device_classes(g):
        cls = [d for d in cls if d not in unused]
        if not cls:
            continue
        if uni is not None:
            tr = uni
        else:
            into = full[:, :, cls].copy()                       # [T, sender, receiver]
            into[:, cls, np.arange(len(cls))] = np.inf          # not from itself
            tr = into.min(axis=(1, 2)) if g.num_devices > 1 else np.zeros(g.num_tensors)
        out.append(_Class(cls, float(g.mem_capacity[cls[0]]), g.compute_s[:, cls[0]] * scale,
                          np.where(np.isfinite(tr), tr, 0.0) * scale))
    return out


class _Pricing:
    """The least reduced-cost set of one class: ``min (c - pi) x + tr y``, ``y_t >= x_w - x_u``
    for each consumer ``w`` of tensor ``t`` (producer ``u``), memory, co-location."""

    def __init__(self, g: CostGraph, cls: _Class, grp: np.ndarray) -> None:
        n, tr = g.num_nodes, cls.tr
        ok = np.isfinite(cls.cost)
        self.n, self.cls, self.base = n, cls, np.where(ok, cls.cost, 0.0)
        m = Model()
        m.var(n, ub=ok.astype(float), integer=True)             # x: the set's nodes
        costly = np.flatnonzero(tr > 0)
        slot = np.full(tr.size, -1)
        slot[costly] = m.var(costly.size, ub=1.0, cost=tr[costly])   # y: tensors received
        e = np.flatnonzero(slot[g.edge_tensor] >= 0)
        m.rows(np.stack([slot[g.edge_tensor[e]], g.edge_dst[e], g.edge_src[e]], axis=1),
               [1.0, -1.0, 1.0], lb=0.0)
        if np.isfinite(cls.cap) and g.mem_bytes.sum() > cls.cap:
            m.rows(np.arange(n)[None, :], g.mem_bytes[None, :] / cls.cap, ub=1.0)
        order = np.argsort(grp, kind="stable")
        same = np.flatnonzero(grp[order][1:] == grp[order][:-1])
        m.rows(np.stack([order[same], order[same + 1]], axis=1), [1.0, -1.0], 0.0, 0.0)
        self.h = m.highs(threads=THREADS)
        self.h.setOptionValue("mip_improving_solution_save", True)
        for name, value in PRICING_OPTIONS.items():
            self.h.setOptionValue(name, value)

    def price(self, pi: np.ndarray, deadline: float) -> tuple[float, list[np.ndarray]]:
        """A lower bound on the least ``c_S - pi(S)`` (-inf when unsolved) and the sets of
        negative reduced cost the branch and bound found, best last."""
        h = self.h
        h.changeColsCost(self.n, np.arange(self.n, dtype=np.int32), self.base - pi)
        h.setOptionValue("time_limit", max(deadline - time.perf_counter(), 0.05))
        h.run()
        if h.getModelStatus() not in (highspy.HighsModelStatus.kOptimal,
                                      highspy.HighsModelStatus.kTimeLimit):
            return -np.inf, []
        info = h.getInfo()
        if info.primal_solution_status != 2:      # no feasible solution found
            return float(info.mip_dual_bound), []
        sets = [np.flatnonzero(np.asarray(s.col_value[:self.n]) > 0.5)
                for s in h.getSavedMipSolutions() if s.objective < 0]
        sets.append(np.flatnonzero(np.asarray(h.getSolution().col_value[:self.n]) > 0.5))
        return float(info.mip_dual_bound), sets


def _set_cost(g: CostGraph, cls: _Class, nodes: np.ndarray) -> float:
    """Compute of ``nodes`` on the class's device plus every tensor they receive."""
    inside = np.zeros(g.num_nodes, dtype=bool)
    inside[nodes] = True
    cut = inside[g.edge_dst] & ~inside[g.edge_src]
    return float(cls.cost[nodes].sum() + cls.tr[np.unique(g.edge_tensor[cut])].sum())


def _intervals(g: CostGraph, k: int, cls: _Class, grp: np.ndarray
               ) -> list[tuple[int, np.ndarray, float]]:
    """Every interval ``i..j`` of the topological order, with the nodes co-located with
    its own, that the class can hold (memory, support), the interval at most
    :data:`INTERVAL_MAX` long, with its cost.

    From each ``i`` the sets grow by steps ``j``; a node joins at the step its co-location
    group first appears, and a tensor is received from the step its first consumer joins
    until its producer does, so every step's cost is a cumulative sum."""
    n, tr = g.num_nodes, cls.tr
    ok = np.isfinite(cls.cost)
    cost = np.where(ok, cls.cost, 0.0)
    has = np.isin(np.arange(tr.size), g.edge_tensor)
    prod = g.tensor_src
    first = np.full(grp.max() + 1, n, dtype=np.int64)     # each group's first member >= i
    out = []
    for i in range(n - 1, -1, -1):
        first[grp[i]] = i
        L = min(INTERVAL_MAX, n - i)
        join = first[grp] - i                               # the step each node joins
        inside = join < L
        step_cost = np.bincount(join[inside], weights=cost[inside], minlength=L)
        step_mem = np.bincount(join[inside], weights=g.mem_bytes[inside], minlength=L)
        step_bad = np.bincount(join[inside], weights=~ok[inside], minlength=L)
        recv = np.full(tr.size, n, dtype=np.int64)          # step the first consumer joins
        np.minimum.at(recv, g.edge_tensor, join[g.edge_dst])
        lo, hi = recv[has], np.minimum(join[prod[has]], L)
        live = lo < hi
        delta = np.bincount(lo[live], weights=tr[has][live], minlength=L + 1) - \
            np.bincount(hi[live], weights=tr[has][live], minlength=L + 1)
        total = np.cumsum(step_cost) + np.cumsum(delta[:L])
        fits = (np.cumsum(step_mem) <= cls.cap) & (np.cumsum(step_bad) == 0)
        stop = L if fits.all() else int(np.argmin(fits))
        for j in range(stop):
            if join[i + j] == j:                            # the set grew at this step
                out.append((k, np.flatnonzero(join <= j), float(total[j])))
    return out


def _placement(classes: list[_Class], sets: list[tuple[int, np.ndarray]], chosen: np.ndarray,
               n: int) -> np.ndarray:
    """The placement of a partition into the columns ``chosen``: each class's sets on its
    devices in order."""
    p = np.zeros(n, dtype=np.int64)
    used = [0] * len(classes)
    for j in chosen:
        k, nodes = sets[j]
        p[nodes] = classes[k].devices[used[k]]
        used[k] += 1
    return p


def partition_bound(graph: CostGraph, time_limit: float, start: Optional[np.ndarray] = None,
                    stop_at: float = np.inf, stop: Callable[[], bool] = lambda: False,
                    better: Optional[Callable[[np.ndarray, float], None]] = None
                    ) -> tuple[float, dict]:
    """The Lagrangian bound of the set partitioning relaxation (module docstring), in
    seconds, found within ``time_limit`` seconds. It stops early once the bound reaches
    ``stop_at`` (the incumbent's value), the column generation converges or ``stop()``
    says so (a branch and bound run beside it has ended). ``start`` (a placement, the
    incumbent) gives the first columns. Also returns figures: the bound, iterations,
    columns, the master's last value (an upper bound on the relaxation) and whether it
    converged.

    Given ``better``, the restricted master heuristic
    (:func:`policies.solvers.master_heuristic.restricted_master_ip`) also looks for a
    placement better than ``stop_at`` among the columns: first once :data:`HEURISTIC_FROM`
    of the time has passed, then, each run at most :data:`HEURISTIC_RUN` of the time,
    whenever the column generation has spent as long again as the heuristic's share
    :data:`HEURISTIC_SHARE` allows, once more in the last :data:`HEURISTIC_RUN` of the
    time, over the most columns, and with the time left once it converges.
    ``better(placement, value)`` receives each better placement (its value on the
    simulator), which is then the incumbent the bound stops at."""
    out: list = []

    def run() -> None:
        try:
            out.append(_column_generation(graph, time_limit, start, stop_at, stop, better))
        except BaseException as e:       # raised again in the caller's thread
            out.append(e)

    worker = threading.Thread(target=run, name="partition_bound", daemon=True)
    worker.start()
    worker.join()
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


def _column_generation(graph: CostGraph, time_limit: float, start: Optional[np.ndarray],
                       stop_at: float, stop: Callable[[], bool],
                       better: Optional[Callable[[np.ndarray, float], None]]
                       ) -> tuple[float, dict]:
    """:func:`partition_bound`'s work, in its own thread (:data:`THREADS`)."""
    t0 = time.perf_counter()
    deadline = t0 + time_limit
    if graph.num_nodes == 0:
        return 0.0, {}
    g = graph
    scale = 1e3 / max(lower_bound(g, "sequential"), 1e-12)   # the objective near 1000
    classes = _classes(g, scale)
    grp = colocation_groups(g)
    master = Master(g.num_nodes, [c.count for c in classes], THREADS)
    cols = []
    if start is not None:
        for d in np.unique(start):
            k = next((k for k, c in enumerate(classes)
                      if np.array_equal(g.compute_s[:, d], g.compute_s[:, c.devices[0]])
                      and g.mem_capacity[d] == c.cap), None)
            if k is not None:
                nodes = np.flatnonzero(start == d)
                cols.append((k, nodes, _set_cost(g, classes[k], nodes)))
    incumbent = np.arange(len(cols)) if sum(c[1].size for c in cols) == g.num_nodes \
        else np.zeros(0, dtype=np.int64)
    for k, c in enumerate(classes):
        cols += _intervals(g, k, c, grp)
        if time.perf_counter() > deadline:
            break
    master.add(cols)
    pricing = [_Pricing(g, c, grp) for c in classes]

    def lagrange(pi: np.ndarray) -> tuple[float, list]:
        total, found = float(pi.sum()), []
        for k, (c, p) in enumerate(zip(classes, pricing)):
            low, sets = p.price(pi, deadline)
            total += c.count * min(0.0, low)
            found += [(k, nodes, _set_cost(g, c, nodes)) for nodes in sets if nodes.size]
        return total, found

    sim = Simulator(g)
    heuristic = {"due": t0 + HEURISTIC_FROM * time_limit, "last": False, "s": 0.0, "runs": 0,
                 "found": 0}

    def improve(until: float) -> None:
        """The restricted master heuristic over the columns so far, until ``until``."""
        nonlocal incumbent, stop_at, target
        t = time.perf_counter()
        out = restricted_master_ip(g.num_nodes, [c.count for c in classes], master.sets,
                                   np.asarray(master.cost), master.reduced(), incumbent, until,
                                   THREADS)
        if out is not None:
            p = _placement(classes, master.sets, out[0], g.num_nodes)
            r = sim.evaluate(p, "sequential")
            if r.feasible and r.value < stop_at:
                incumbent, stop_at = out[0], r.value
                target = stop_at * scale * (1 - STOP_GAP)
                heuristic["found"] += 1
                better(p, r.value)
        spent = time.perf_counter() - t
        heuristic["s"] += spent
        heuristic["runs"] += 1
        heuristic["due"] = time.perf_counter() + spent * (1 - HEURISTIC_SHARE) / HEURISTIC_SHARE

    fastest = np.min(np.where(np.isfinite(g.compute_s), g.compute_s, np.inf), axis=1) * scale
    center = np.where(np.isfinite(fastest), fastest, 0.0)
    best, found = lagrange(center)
    master.add(found)

    target = stop_at * scale * (1 - STOP_GAP)
    it, z, converged, pruned = 0, np.inf, False, 0
    while time.perf_counter() < deadline and best < target and not stop():
        it += 1
        z, pi, mu = master.solve()
        if z - best <= STOP_GAP * abs(z):
            converged = True
            if better is not None and time.perf_counter() < deadline and not stop():
                improve(deadline)
            break
        pruned += master.prune(z - best)
        now = time.perf_counter()
        last = deadline - now <= HEURISTIC_RUN * time_limit and not heuristic["last"]
        if better is not None and (now >= heuristic["due"] or last):
            heuristic["last"] |= last
            improve(min(deadline, now + HEURISTIC_RUN * time_limit))
            if best >= target:
                break
        sep = SMOOTHING * center + (1 - SMOOTHING) * pi
        value, found = lagrange(sep)
        if value > best:
            center, best = sep, value
        improving = [f for f in found if f[2] - pi[f[1]].sum() - mu[f[0]] < -1e-9 * abs(z)]
        master.add(found)
        if not improving and time.perf_counter() < deadline:
            # a mispricing: the smoothed prices gave nothing the master can use
            value, found = lagrange(pi)
            if value > best:
                center, best = pi.copy(), value
            master.add(found)
    bound = best / scale
    bound -= 1e-9 * abs(bound)
    info = {"partition_bound_s": float(bound), "partition_iterations": it,
            "partition_columns": master.columns, "partition_pruned": pruned,
            "partition_master_s": float(z / scale),
            "partition_converged": converged, "partition_s": time.perf_counter() - t0}
    if better is not None:
        info.update(master_heuristic_runs=heuristic["runs"], master_heuristic_found=heuristic["found"],
                    master_heuristic_s=heuristic["s"])
    return bound, info
