"""The latency IP of Tarnawski et al. (``latency-ip/lip.py``), solved by HiGHS.

The model is the simulator's ``latency`` objective (:mod:`envs.call_latency`). Its
units are the blocks of :func:`policies.solvers.latency.blocks` (co-location classes,
merged where they reach each other: such nodes share a machine in every feasible
placement) and its machines are the CPUs (one machine: they are unlimited) and each
accelerator ``m``. Variables and rows, as in ``lip.py`` with one call per accelerator:

* ``x[b, m]`` binary, ``sum_m x[b, m] = 1``; 0 where a node of ``b`` cannot run on
  ``m``; memory ``sum_b mem_b x[b, m] <= cap_m`` on each accelerator;
* contiguity: ``z[b, m] >= x[b, m]``, and for each block edge ``a -> c``:
  ``z[c, m] <= z[a, m]`` and ``z[c, m] <= x[c, m] - x[a, m] + 1`` (no path leaves
  ``m``'s blocks and comes back, so the graph contracted by accelerator is acyclic);
* transfers, per tensor ``t`` (producer ``u``) and accelerator ``m``:
  ``in[t, m] >= x[B(v), m] - x[B(u), m]`` and ``out[t, m] >= x[B(u), m] - x[B(v), m]``
  for each consumer ``v``;
* times: ``finish_m = start_m + sum_b acc_b x[b, m] + sum_t cost_t (in[t, m] + out[t, m])``,
  ``start_m >= lat_u - (1 - in[t, m]) M``, ``lat_i >= finish_m - (1 - x[B(i), m]) M``,
  ``lat_i >= cpu_i x[B(i), CPU]`` and ``lat_v >= lat_u + cpu_v x[B(v), CPU]`` on every
  edge; the objective ``T >= lat_i``.

The objective's lower bound starts at the path bound of
:mod:`policies.solvers.latency_bound` (with the start's critical path among its paths).
Where ``lip.py`` takes the sum of all CPU times as its big-M ``M``, this model takes the
value of its start (a placement at least that good exists, so no latency of an optimum
exceeds it), which is the same model with a tighter relaxation. Identical
accelerators start their calls in the order of their index (symmetry breaking), and the
MIP start is the best placement of :func:`policies.solvers.latency.latency_start`,
relabelled to that order.
"""
from __future__ import annotations

import time
from typing import Optional

import numpy as np

from envs.call_latency import cpu_devices, tensor_cost
from envs.simulator import Simulator
from hsdag_core.costgraph import CostGraph
from policies.solvers.bounds import lower_bound
from policies.solvers.highs_model import Model
from policies.solvers.latency import blocks, latency_start
from policies.solvers.latency_bound import critical_path, path_bound
from policies.solvers.result import SolveResult, device_classes, finish

__all__ = ["solve_latency_ip"]


def _relabel(sim: Simulator, p: np.ndarray, accs: list[int]) -> np.ndarray:
    """``p`` with the used accelerators of each class of identical ones renumbered in the
    order their calls start."""
    _, _, bd, end = sim.calls.evaluate(p)
    q = p.copy()
    for cls in device_classes(sim.graph):
        cls = [d for d in cls if d in accs]
        used = [d for d in cls if (p == d).any()]
        start = {d: end[np.argmax(p == d)] - bd[f"call_{sim.graph.devices[d]}_s"] for d in used}
        used.sort(key=lambda d: start[d])
        for new, old in zip(cls, used):
            q[p == old] = new
    return q


def solve_latency_ip(graph: CostGraph, objective: str = "latency", *,
                     time_limit: Optional[float] = 60.0, rel_gap: float = 1e-7,
                     start: Optional[np.ndarray] = None, start_share: float = 0.2,
                     threads: Optional[int] = None) -> SolveResult:
    """Exact latency optimum (module docstring).

    Args:
        start: the MIP start (a placement); None: :func:`latency_start` given
            ``start_share`` of ``time_limit``. The result is never worse than the start.
    """
    t0 = time.perf_counter()
    if objective != "latency":
        raise ValueError(f"the latency IP solves the latency objective, not {objective!r}")
    g = graph
    sim = Simulator(g)
    is_cpu = cpu_devices(g)
    cpus = np.flatnonzero(is_cpu)
    accs = [int(d) for d in np.flatnonzero(~is_cpu)]
    machines = ([int(cpus[0])] if cpus.size else []) + accs
    ncpu = 1 if cpus.size else 0
    if start is None:
        start = latency_start(g, None if time_limit is None else start_share * time_limit)
    if start is not None and not sim.evaluate(start, objective).feasible:
        start = None
    cost = tensor_cost(g)
    paths = []
    if start is not None:
        start = _relabel(sim, np.where(is_cpu[start], machines[0], start), accs)
        big = sim.evaluate(start, objective).value * (1 + 1e-6)
        paths.append(critical_path(g, sim.calls.evaluate(start)[3]))
    else:
        cpu_t = g.compute_s[:, cpus[0]].sum() if cpus.size else 0.0
        acc_t = np.where(np.isfinite(g.compute_s), g.compute_s, 0).max(axis=1).sum()
        big = float(cpu_t + acc_t + 2 * cost.sum())
    floor = max(lower_bound(g, objective), path_bound(g, paths))
    b = blocks(g)
    nb, M, K = len(b.order), len(machines), len(accs)
    m = Model()
    runs = np.isfinite(g.compute_s[:, machines])                  # [n, M]
    ub = np.ones((nb, M))
    np.minimum.at(ub, b.of, runs.astype(float))
    x = m.var((nb, M), ub=ub, integer=True)
    m.rows(x, 1.0, 1.0, 1.0)
    for k, d in enumerate(accs):
        cap = g.mem_capacity[d]
        if np.isfinite(cap) and b.mem.sum() > cap:
            m.rows(x[:, ncpu + k][None, :], b.mem[None, :] / cap, ub=1.0)
    # contiguity
    if K and b.edges.size:
        z = m.var((nb, K), ub=1.0)
        a, c = b.edges[:, 0], b.edges[:, 1]
        for k in range(K):
            xm = x[:, ncpu + k]
            m.rows(np.stack([z[:, k], xm], axis=1), [1.0, -1.0], lb=0.0)
            m.rows(np.stack([z[c, k], z[a, k]], axis=1), [1.0, -1.0], ub=0.0)
            m.rows(np.stack([z[c, k], xm[c], xm[a]], axis=1), [1.0, -1.0, 1.0], ub=1.0)
    # transfers across blocks: (tensor, producer block, consumer block)
    eb_u, eb_v = b.of[g.edge_src], b.of[g.edge_dst]
    cross = eb_u != eb_v
    ts = np.unique(g.edge_tensor[cross])
    tix = {int(t): k for k, t in enumerate(ts)}
    lat = m.var(g.num_nodes, ub=big)
    st = m.var(K, ub=big)
    fin = m.var(K, ub=big)
    T = m.var(1, lb=floor, ub=big, cost=1.0)
    if K and ts.size:
        cin = m.var((ts.size, K), ub=1.0)
        cout = m.var((ts.size, K), ub=1.0)
        ek = np.array([tix[int(t)] for t in g.edge_tensor[cross]], dtype=np.int64)
        bu, bv = eb_u[cross], eb_v[cross]
        for k in range(K):
            xm = x[:, ncpu + k]
            m.rows(np.stack([cin[ek, k], xm[bv], xm[bu]], axis=1), [1.0, -1.0, 1.0], lb=0.0)
            m.rows(np.stack([cout[ek, k], xm[bu], xm[bv]], axis=1), [1.0, -1.0, 1.0], lb=0.0)
            # start_m >= lat_u - (1 - in[t, m]) M
            m.rows(np.stack([np.full(ts.size, st[k]), lat[g.tensor_src[ts]], cin[:, k]], axis=1),
                   [1.0, -1.0, -big], lb=-big)
    for k, d in enumerate(accs):
        accload = np.zeros(nb)
        np.add.at(accload, b.of, np.where(np.isfinite(g.compute_s[:, d]), g.compute_s[:, d], 0.0))
        cols = [fin[k:k + 1], st[k:k + 1], x[:, ncpu + k]]
        coefs = [[1.0], [-1.0], -accload]
        if ts.size:
            cols += [cin[:, k], cout[:, k]]
            coefs += [-cost[ts], -cost[ts]]
        m.rows(np.concatenate(cols)[None, :], np.concatenate(coefs)[None, :], 0.0, 0.0)
        # lat_i >= finish_m - (1 - x[B(i), m]) M
        n = g.num_nodes
        m.rows(np.stack([lat, np.full(n, fin[k]), x[b.of, ncpu + k]], axis=1),
               [1.0, -1.0, -big], lb=-big)
    if ncpu:
        cpu_t = np.where(np.isfinite(g.compute_s[:, machines[0]]), g.compute_s[:, machines[0]], 0.0)
        m.rows(np.stack([lat, x[b.of, 0]], axis=1), np.stack([np.ones(g.num_nodes), -cpu_t], axis=1),
               lb=0.0)
        v = g.edge_dst
        m.rows(np.stack([lat[v], lat[g.edge_src], x[b.of[v], 0]], axis=1),
               np.stack([np.ones(v.size), -np.ones(v.size), -cpu_t[v]], axis=1), lb=0.0)
    else:
        m.rows(np.stack([lat[g.edge_dst], lat[g.edge_src]], axis=1), [1.0, -1.0], lb=0.0)
    sinks = np.setdiff1d(np.arange(g.num_nodes), g.edge_src)
    m.rows(np.stack([np.full(sinks.size, T[0]), lat[sinks]], axis=1), [1.0, -1.0], lb=0.0)
    # identical accelerators: calls start in index order
    for cls in device_classes(g):
        ks = [accs.index(d) for d in cls if d in accs]
        for k0, k1 in zip(ks, ks[1:]):
            m.rows(np.array([[st[k0], st[k1]]]), [1.0, -1.0], ub=0.0)
    mip_start, info = None, {"blocks": nb, "big_m_s": big}
    if start is not None:
        info["start_s"] = float(sim.evaluate(start, objective).value)
        onehot = np.zeros((nb, M))
        first = np.array([np.argmax(b.of == k) for k in range(nb)])
        onehot[np.arange(nb), [machines.index(int(start[i])) for i in first]] = 1.0
        mip_start = (x.ravel(), onehot.ravel())
    spent = time.perf_counter() - t0
    res = m.solve(None if time_limit is None else max(time_limit - spent, 0.01), rel_gap,
                  big, start=mip_start, threads=threads)
    info.update(mip_status=int(res.status), mip_message=res.message, mip_nodes=res.mip_node_count)
    if mip_start is not None:
        info["start_accepted"] = bool(res.start_accepted)
    bound = max(floor, res.mip_dual_bound if np.isfinite(res.mip_dual_bound) else -np.inf)
    p = None
    if res.x is not None:
        on = np.asarray(res.x[x.ravel()]).reshape(x.shape).argmax(axis=1)
        p = np.array(machines, dtype=np.int64)[on[b.of]]
        info["mip_objective_s"] = float(res.fun)
    proven = res.status == 0
    status = "optimal" if proven else (f"stopped: {res.message}" if res.x is not None else
                                       ("no feasible placement exists" if res.status == 2 else
                                        f"HiGHS found no placement ({res.message})"))
    out = finish(g, objective, "milp", p, t0, bound=bound, proven=proven, status=status, info=info)
    if start is not None and (not out.feasible or info["start_s"] < out.value):
        out = finish(g, objective, "milp", start, t0, bound=bound, proven=proven,
                     status=f"the start: HiGHS found none better ({res.message})", info=info)
    return out
