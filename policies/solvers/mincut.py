"""The sequential objective by s-t minimum cuts: exact for two devices, alpha-expansion beyond.

The sequential objective (:mod:`envs.simulator`) of a placement ``p`` is::

    f(p) = sum_i c[i, p_i]
         + sum_t sum_{d != p_src(t)} [some consumer of t is on d] * tr[t, p_src(t), d]
         + beta * sum_i [p_i != p_{i+1}]

Every term is a sum of *submodular* functions of binary choices, so one binary
choice per node ("keep" = source side S, "switch" = sink side T) is solved
exactly by a minimum s-t cut (Kolmogorov & Zabih 2004):

* unary ``c[i, keep]`` / ``c[i, switch]``: edges ``i -> t`` / ``s -> i``
  (absent capacity = infinite = device cannot run the node);
* Potts boundary ``beta [p_i != p_{i+1}]``: a pairwise term with
  ``E(0,1) + E(1,0) >= E(0,0) + E(1,1)``, an edge ``i -> i+1``;
* a tensor sent to another device costs its transfer **once** whatever the
  number of consumers there. "``u`` in S and some consumer in T" is one
  auxiliary node ``w`` with ``u -> w`` (cost) and ``w -> v`` (inf) for every
  consumer ``v``; "``u`` in T and some consumer in S" is ``v -> w`` (inf) and
  ``w -> u`` (cost), one auxiliary node per tensor and direction, so a
  direction-dependent cost ``tr[t, a, b] != tr[t, b, a]`` is exact;
* co-location: infinite edges both ways between members of a class.

Two devices: start from "everything on device 0" and let every node switch to
device 1: the cut is the exact optimum (:func:`solve_mincut`). Memory limits
are not in the cut; its value is then a lower bound, and the cut is optimal
whenever its placement fits.

Three or more devices: alpha-expansion (Boykov, Veksler & Zabih 2001). From
the better of the best single device that holds the whole graph and a
contiguous fill (nodes in topological order fill the fastest device's memory,
then the next device's), repeat over devices ``alpha``: the move "every
node keeps its device or switches to ``alpha``" is one cut, exact when each
tensor's transfer time does not depend on the pair of devices (otherwise an
interaction that would lower the cost when the producer moves is dropped,
which over-estimates the move). The cut is memory-unaware; a move that would
overflow ``alpha`` is replaced by the best fitting one among moves found by
pricing memory (``lam * mem_i`` added to switching, ``lam`` searched by
doubling and bisection) and windows of the move's nodes, consecutive in
topological order, that fit. A move is kept only if the simulator confirms a
lower value. Interchangeable devices of unlimited memory beyond the first are
never expanded onto: they cannot help
(:func:`policies.solvers.result.redundant_for_sequential`). A heuristic: it stops at
a local optimum of expansion moves.
"""
from __future__ import annotations

import time
from collections import defaultdict
from typing import Optional

import networkx as nx
import numpy as np

from envs.simulator import Simulator
from hsdag_core.costgraph import CostGraph
from policies.solvers.bounds import lower_bound
from policies.solvers.result import SolveResult, colocation_groups, finish, redundant_for_sequential

__all__ = ["expansion_move", "solve_mincut", "solve_alpha_expansion"]

_S, _T = "s", "t"
INF = float("inf")


class _Cut:
    """Accumulates a binary energy as capacities of an s-t graph."""

    def __init__(self, n: int) -> None:
        self.keep = np.zeros(n)      # cost when the node stays (source side)
        self.switch = np.zeros(n)    # cost when it switches (sink side)
        self.cap: dict[tuple, float] = defaultdict(float)
        self.const = 0.0
        self._aux = 0

    def edge(self, u, v, c: float) -> None:
        if c > 0:
            self.cap[(u, v)] += c

    def pairwise(self, i: int, j: int, a: float, b: float, c: float, d: float) -> None:
        """E(x_i, x_j) with E(0,0)=a, E(0,1)=b, E(1,0)=c, E(1,1)=d (submodular)."""
        self.const += a
        self.switch[i] += c - a
        self.switch[j] += d - c
        self.edge(i, j, b + c - a - d)

    def src_and_any_sink(self, u: int, vs, c: float) -> None:
        """Pay ``c`` iff ``u`` is in S and some ``v`` of ``vs`` is in T."""
        if c <= 0 or not len(vs):
            return
        w = ("aux", self._aux)
        self._aux += 1
        self.edge(u, w, c)
        for v in vs:
            self.cap[(w, int(v))] = INF

    def sink_and_any_src(self, u: Optional[int], vs, c: float) -> None:
        """Pay ``c`` iff ``u`` is in T (or always, ``u=None``) and some ``v`` of ``vs`` is in S."""
        if c <= 0 or not len(vs):
            return
        w = ("aux", self._aux)
        self._aux += 1
        for v in vs:
            self.cap[(int(v), w)] = INF
        self.edge(w, _T if u is None else u, c)

    def solve(self) -> tuple[float, np.ndarray] | None:
        """(energy, x) of the minimum cut, None when every cut is infinite."""
        G = nx.DiGraph()
        n = self.keep.size
        G.add_nodes_from([_S, _T])
        G.add_nodes_from(range(n))
        const = self.const
        for i in range(n):
            k, s = self.keep[i], self.switch[i]
            m = min(k, s)
            if np.isfinite(m):
                const += m
                k, s = k - m, s - m
            for (u, v), c in (((i, _T), k), ((_S, i), s)):
                if c == INF:
                    G.add_edge(u, v)
                elif c > 0:
                    G.add_edge(u, v, capacity=float(c))
        for (u, v), c in self.cap.items():
            if c == INF:
                G.add_edge(u, v)
            else:
                G.add_edge(u, v, capacity=float(c))
        try:
            value, (_, sink_side) = nx.minimum_cut(G, _S, _T)
        except nx.NetworkXUnbounded:
            return None
        x = np.zeros(n, dtype=bool)
        x[[v for v in sink_side if isinstance(v, (int, np.integer))]] = True
        return const + value, x


def expansion_move(graph: CostGraph, old: np.ndarray, alpha: int,
                   transfer: Optional[np.ndarray] = None,
                   penalty: Optional[np.ndarray] = None) -> tuple[float, np.ndarray] | None:
    """Best move "every node keeps ``old`` or switches to ``alpha``" by one min cut.

    Returns ``(energy, new placement)`` or None when no move has finite cost.
    The energy is the sequential objective of the new placement when the
    move is exact (see the module docstring) plus ``penalty[i]`` for every
    node that switches; memory is ignored.
    """
    g = graph
    n = g.num_nodes
    tr = g.transfer_s() if transfer is None else transfer
    old = np.asarray(old, dtype=np.int64)
    cut = _Cut(n)
    cut.keep += g.compute_s[np.arange(n), old]
    cut.switch += g.compute_s[:, alpha]
    if penalty is not None:
        cut.switch += penalty
    fixed = old == alpha
    cut.switch[fixed] = INF
    # Potts boundary between consecutive nodes (a metric: the move is submodular)
    if g.boundary_s > 0:
        b = g.boundary_s
        for i in range(n - 1):
            o_i, o_j = old[i], old[i + 1]
            cut.pairwise(i, i + 1, b * (o_i != o_j), b * (o_i != alpha), b * (alpha != o_j), 0.0)
    # co-location: a class moves as one (its members share ``old``)
    grp = colocation_groups(g)
    for members in np.split(np.argsort(grp, kind="stable"),
                            np.flatnonzero(np.diff(np.sort(grp))) + 1):
        for a, b in zip(members[:-1], members[1:]):
            cut.cap[(int(a), int(b))] = INF
            cut.cap[(int(b), int(a))] = INF
    # tensors
    order = np.argsort(g.edge_tensor, kind="stable")
    bounds = np.searchsorted(g.edge_tensor[order], np.arange(g.num_tensors + 1))
    for t in range(g.num_tensors):
        cons = g.edge_dst[order[bounds[t]:bounds[t + 1]]]
        if not cons.size:
            continue
        u = int(g.tensor_src[t])
        L = int(old[u])
        by_dev: dict[int, np.ndarray] = {}
        for d in np.unique(old[cons]):
            by_dev[int(d)] = cons[old[cons] == d]
        if L == alpha:
            for d, vs in by_dev.items():
                if d != alpha:
                    cut.sink_and_any_src(None, vs, tr[t, alpha, d])
            continue
        for d, vs in by_dev.items():
            if d == L:
                cut.sink_and_any_src(u, vs, tr[t, alpha, L])
            elif d != alpha:
                cut.sink_and_any_src(None, vs, tr[t, L, d])
                cut.sink_and_any_src(u, vs, tr[t, alpha, d] - tr[t, L, d])
        if alpha in by_dev:
            cut.keep[u] += tr[t, L, alpha]
        else:
            cut.src_and_any_sink(u, cons, tr[t, L, alpha])
    res = cut.solve()
    if res is None:
        return None
    energy, x = res
    new = old.copy()
    new[x] = alpha
    return energy, new


def solve_mincut(graph: CostGraph, objective: str = "sequential", *,
                 time_limit: float | None = None) -> SolveResult:
    """Exact sequential optimum on two devices by one s-t minimum cut.

    The bound is the cut's value (the optimum without memory limits); the
    result is optimal whenever its placement also fits in memory.
    """
    t0 = time.perf_counter()
    if objective != "sequential":
        raise ValueError("mincut solves the sequential objective only; for "
                         f"{objective!r} use another method")
    if graph.num_devices != 2:
        raise ValueError(f"mincut is exact for two devices, this graph has "
                         f"{graph.num_devices}; use milp (exact) or alpha-expansion")
    res = expansion_move(graph, np.zeros(graph.num_nodes, dtype=np.int64), 1)
    if res is None:
        return finish(graph, objective, "mincut", None, t0,
                      status="no placement has finite cost (a node or co-location class "
                             "runs on neither device)")
    energy, p = res
    return finish(graph, objective, "mincut", p, t0, bound=energy,
                  status="minimum cut", info={"cut_energy_s": energy})


def _fill(graph: CostGraph) -> Optional[np.ndarray]:
    """Co-location classes in topological order (of their first node) fill the
    devices one after another, fastest device first, each up to its memory."""
    grp = colocation_groups(graph)
    G = int(grp.max()) + 1
    comp = np.zeros((G, graph.num_devices))
    np.add.at(comp, grp, graph.compute_s)
    mem = np.bincount(grp, weights=graph.mem_bytes, minlength=G)
    order = np.argsort(graph.compute_s.sum(axis=0), kind="stable")
    used = np.zeros(graph.num_devices)
    dev = np.full(G, -1, dtype=np.int64)
    k = 0
    for c in range(G):                      # group ids follow first-node order
        for j in range(k, len(order)):
            d = order[j]
            if np.isfinite(comp[c, d]) and used[d] + mem[c] <= graph.mem_capacity[d]:
                dev[c], k = d, j
                used[d] += mem[c]
                break
        else:
            return None
    return dev[grp]


def _start(graph: CostGraph, objective: str) -> Optional[np.ndarray]:
    """The better of: the best single device that runs and holds everything,
    and :func:`_fill`; else each co-location class on its fastest device."""
    sim = Simulator(graph)
    cands = [graph.single_device(d) for d in range(graph.num_devices)
             if np.isfinite(graph.compute_s[:, d]).all()]
    filled = _fill(graph)
    if filled is not None:
        cands.append(filled)
    best, best_v = None, np.inf
    for p in cands:
        r = sim.evaluate(p, objective)
        if r.feasible and r.value < best_v:
            best, best_v = p, r.value
    if best is not None:
        return best
    grp = colocation_groups(graph)
    G = int(grp.max()) + 1
    total = np.zeros((G, graph.num_devices))
    np.add.at(total, grp, graph.compute_s)
    dev = total.argmin(axis=1)
    if not np.isfinite(total[np.arange(G), dev]).all():
        return None
    return dev[grp]


def _fitting_move(graph: CostGraph, p: np.ndarray, q: np.ndarray, alpha: int, tr: np.ndarray,
                  sim: Simulator, scale: float, steps: int = 8, windows: int = 5):
    """The best move onto ``alpha`` that fits its memory, by simulator value, or None.

    ``q`` is the unconstrained best move. Candidates: (1) Lagrangian moves,
    ``lam * mem_i`` added to switching, ``lam`` doubled until the move fits
    then bisected; (2) windows of ``q``'s switched nodes that are consecutive
    in topological order and fit, the ``windows`` of them that save the most
    compute (co-location classes cut by a window go back whole).
    """
    mem = graph.mem_bytes
    cap = graph.mem_capacity[alpha]
    cands: list[np.ndarray] = []

    def fits(x: np.ndarray) -> bool:
        return graph.memory_use(x)[alpha] <= cap

    lo, lam = 0.0, scale / max(float(mem.max()), 1e-300)
    for _ in range(30):
        res = expansion_move(graph, p, alpha, tr, lam * mem)
        if res is not None and fits(res[1]):
            cands.append(res[1])
            break
        lo, lam = lam, 2 * lam
    hi = lam
    for _ in range(steps if cands else 0):
        mid = 0.5 * (lo + hi)
        res = expansion_move(graph, p, alpha, tr, mid * mem)
        if res is not None and fits(res[1]):
            hi = mid
            cands.append(res[1])
        else:
            lo = mid
    moved = np.flatnonzero((q == alpha) & (p != alpha))
    base = graph.memory_use(p)[alpha]
    n = graph.num_nodes
    saving = graph.compute_s[moved, p[moved]] - graph.compute_s[moved, alpha]
    csum = np.concatenate([[0.0], np.cumsum(mem[moved])])
    ssum = np.concatenate([[0.0], np.cumsum(saving)])
    ends = np.searchsorted(csum, csum[:-1] + (cap - base), side="right") - 1
    gain = ssum[ends] - ssum[:-1]
    grp = colocation_groups(graph)
    for s in np.argsort(-gain, kind="stable")[:windows]:
        if ends[s] <= s:
            continue
        keep = np.zeros(n, dtype=bool)
        keep[moved[s:ends[s]]] = True
        cut_cls = np.unique(grp[moved[~keep[moved]]])
        keep[np.isin(grp, cut_cls)] = False
        x = np.where(keep, alpha, p)
        if fits(x):
            cands.append(x)
    best = None
    for x in cands:
        r = sim.evaluate(x, "sequential")
        if r.feasible and (best is None or r.value < best[0].value):
            best = (r, x)
    return best


def solve_alpha_expansion(graph: CostGraph, objective: str = "sequential", *,
                          time_limit: float | None = 60.0, max_rounds: int = 50) -> SolveResult:
    """Alpha-expansion heuristic for the sequential objective on any number of devices.

    The cut itself ignores memory. The search starts from a feasible
    placement when it finds one (see :func:`_start`), and a move that overflows
    ``alpha``'s memory (the only device a move can fill) is replaced by the
    best fitting move found with a Lagrangian price on memory, so a feasible
    start stays feasible. The bound is :func:`policies.solvers.bounds.lower_bound`
    (every node on its fastest device).
    """
    t0 = time.perf_counter()
    if objective != "sequential":
        raise ValueError("alpha-expansion solves the sequential objective only; for "
                         f"{objective!r} use another method")
    p = _start(graph, objective)
    bound = lower_bound(graph, objective)
    if p is None:
        return finish(graph, objective, "alpha-expansion", None, t0, bound=bound,
                      status="no device runs every node of some co-location class")
    sim = Simulator(graph)
    tr = graph.transfer_s()
    cur = sim.evaluate(p, objective)
    skip = set(redundant_for_sequential(graph))
    targets = [d for d in range(graph.num_devices) if d not in skip]
    moves, rounds, stopped = 0, 0, ""
    improved = True
    while improved and rounds < max_rounds:
        improved = False
        rounds += 1
        for alpha in targets:
            if time_limit is not None and time.perf_counter() - t0 > time_limit:
                stopped = f"; stopped at the time limit of {time_limit:g} s"
                improved = False
                break
            res = expansion_move(graph, p, alpha, tr)
            if res is None:
                continue
            q, cand = res[1], sim.evaluate(res[1], objective)
            if cur.feasible and not cand.feasible and cand.value < cur.value:
                fit = _fitting_move(graph, p, q, alpha, tr, sim, cur.value)
                if fit is None:
                    continue
                cand, q = fit
            if cand.value < cur.value * (1 - 1e-12) and (cand.feasible or not cur.feasible):
                p, cur = q, cand
                moves += 1
                improved = True
    return finish(graph, objective, "alpha-expansion", p, t0, bound=bound,
                  status=f"local optimum of expansion moves after {rounds} round(s), "
                         f"{moves} move(s){stopped}",
                  info={"rounds": rounds, "moves": moves})
