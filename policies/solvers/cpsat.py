"""The parallel objective's placement and schedule with OR-Tools CP-SAT.

The model (times in integer units of ``unit`` seconds, each duration rounded down, so
the model's optimum is never above the true one and its bound stays a bound):

* ``x[i, d]``: node ``i`` on device ``d`` (one device each; none it cannot run on; memory
  and co-location as the simulator checks them);
* one optional interval per node and device (present when ``x[i, d]``), one
  ``NoOverlap`` per device: one node at a time on a device;
* precedence with transfer delays: for every edge ``u -> v``,
  ``start_v >= end_u + c_t (1 - same_uv)``, ``same_uv`` allowed only when ``u`` and
  ``v`` share a device (``c_t``: the tensor's cheapest transfer between two devices);
* a cumulative of all nodes on capacity ``D`` (a redundant constraint that tightens the
  bound) and the makespan above every node's end and above
  :func:`policies.solvers.bounds.lower_bound` (whose head-and-tail bound sees that a
  node's predecessors send their tensors or queue on its device);
* symmetry breaking: within each class of interchangeable devices (same compute,
  memory and transfers), device ``k+1`` is used only by a node of higher index than the
  first node on device ``k``;
* a start (hint): the best of HEFT, Baechi's m-ETF and DOPPLER's critical path under
  the simulator, polished by single-node moves under the simulator
  (:mod:`policies.solvers.polish`, at most :data:`POLISH_SHARE` of the time limit), its
  devices relabelled to respect the symmetry breaking, its list schedule as the start
  times.

CP-SAT runs for two thirds of the time left. Every solution it finds is scored by the
simulator (whose first-come-first-served schedule of a placement can be later than
CP-SAT's schedule of it); when one beats the start it is polished again with the time
that remains. Unless the best placement meets the bound, simulated annealing under the
simulator (:func:`policies.solvers.polish.anneal`) then starts from it for what is left
of the time limit, at most :data:`ANNEAL_MAX_S` seconds and until its runs stop improving: CP-SAT's best schedule can need a
placement whose list schedule single moves do not reach. The best placement, the start
included, is returned. The bound is CP-SAT's bound on the makespan
over every placement and schedule, hence also a bound on the simulator's value; the
result is proven optimal when CP-SAT proves its optimum and the simulator's value meets
it (within :data:`PROOF_GAP`, the rounding to the model's units). Where the simulator's
first-come-first-served schedule of every optimal placement is later than CP-SAT's
schedule, the gap stays open: the solver is exact for schedules, not for the simulator's
list schedule, so the registry does not call it exact.
"""
from __future__ import annotations

import os
import time
from typing import Optional

import numpy as np

from envs.simulator import Simulator
from hsdag_core.costgraph import CostGraph
from policies.solvers.bounds import lower_bound
from policies.solvers.polish import anneal, polish
from policies.solvers.result import SolveResult, device_classes, finish, rel_gap, uniform_transfer

__all__ = ["solve_cpsat_parallel", "start_placement", "HORIZON_UNITS", "PROOF_GAP"]

#: the model's time resolution: the start's makespan is about this many units
HORIZON_UNITS = 10_000_000
#: the share of the time limit the start's polish may take (single-node moves)
POLISH_SHARE = 0.5
#: CP-SAT's optimum proves the simulator's value optimal when the two are this close
#: (relative): the rounding of durations to the model's units
PROOF_GAP = 1e-5
#: the most seconds of simulated annealing after CP-SAT, within the time limit
ANNEAL_MAX_S = 45.0


def start_placement(graph: CostGraph) -> tuple[np.ndarray, str, float]:
    """``(placement, name, value)``: the best of HEFT, m-ETF and the critical path
    (both versions, 50 episodes) under the simulator's parallel objective."""
    from policies.solvers.baechi import solve_m_etf
    from policies.solvers.critical_path import solve_critical_path
    from policies.solvers.heft import solve_heft

    tries = [solve_heft(graph, "parallel"), solve_m_etf(graph, "parallel"),
             solve_critical_path(graph, "parallel", version="intended"),
             solve_critical_path(graph, "parallel", version="coded")]
    ok = [r for r in tries if r.feasible and np.isfinite(r.value)]
    if not ok:
        return np.zeros(graph.num_nodes, dtype=np.int64), "none", np.inf
    best = min(ok, key=lambda r: r.value)
    return np.asarray(best.placement, dtype=np.int64), best.method, float(best.value)


def _relabel(placement: np.ndarray, classes: list[list[int]]) -> np.ndarray:
    """The same placement with the devices of each class renamed in order of first use."""
    out = placement.copy()
    for cls in classes:
        used = [d for d in dict.fromkeys(placement.tolist()) if d in cls]
        rename = dict(zip(used, cls))
        for d, new in rename.items():
            out[placement == d] = new
    return out


def _symmetric_classes(graph: CostGraph) -> list[list[int]]:
    """The classes of :func:`device_classes` with two devices or more, when transfer times
    do not depend on the pair of devices (so renaming devices within a class changes
    nothing); none otherwise."""
    if uniform_transfer(graph) is None:
        return []
    return [cls for cls in device_classes(graph) if len(cls) > 1]


def solve_cpsat_parallel(graph: CostGraph, objective: str = "parallel", *,
                         time_limit: Optional[float] = 60.0, workers: Optional[int] = None,
                         hint: bool = True, seed: int = 0) -> SolveResult:
    """The parallel objective solved with CP-SAT (module docstring)."""
    from ortools.sat.python import cp_model

    t0 = time.perf_counter()
    if objective != "parallel":
        raise ValueError(f"the CP-SAT schedule model solves the parallel objective, not {objective!r}")
    g = graph
    n, D = g.num_nodes, g.num_devices
    sim = Simulator(g)
    start_p, start_name, start_value = start_placement(g) if hint else (None, "none", np.inf)
    heuristic_value = start_value
    budget = None if time_limit is None else max(0.0, float(time_limit) - (time.perf_counter() - t0))
    if start_p is not None and np.isfinite(start_value):  # polish the start: up to half the time
        until = time.perf_counter() + (POLISH_SHARE * budget if budget is not None else 60.0)
        start_p, start_value, _ = polish(sim, start_p, "parallel", until)
    classes = _symmetric_classes(g)
    horizon_s = start_value if np.isfinite(start_value) else float(
        np.where(np.isfinite(g.compute_s), g.compute_s, 0).max(axis=1).sum()
        + (g.transfer_s().max(axis=(1, 2)).sum() if g.num_tensors else 0.0))
    unit = max(horizon_s, 1e-300) / HORIZON_UNITS
    runs = np.isfinite(g.compute_s)
    dur = np.floor(np.where(runs, g.compute_s, 0.0) / unit).astype(np.int64)
    tr = g.transfer_s()
    off = ~np.eye(D, dtype=bool)
    cost_t = (np.floor(tr[:, off].min(axis=1) / unit).astype(np.int64) if D > 1 and g.num_tensors
              else np.zeros(g.num_tensors, dtype=np.int64))
    H = int(np.ceil(horizon_s / unit)) + 1 if np.isfinite(start_value) else \
        int(dur.max(axis=1).sum() + cost_t.sum()) + 1

    m = cp_model.CpModel()
    x = {(i, d): m.NewBoolVar(f"x{i}_{d}") for i in range(n) for d in range(D) if runs[i, d]}
    s = [m.NewIntVar(0, H, f"s{i}") for i in range(n)]
    makespan = m.NewIntVar(0, H, "makespan")
    per_device: list[list] = [[] for _ in range(D)]
    for i in range(n):
        ds = [d for d in range(D) if runs[i, d]]
        if not ds:
            return finish(g, objective, "cpsat", None, t0, status=f"node {g.names[i]} runs on no device")
        m.AddExactlyOne(x[i, d] for d in ds)
        for d in ds:
            end = m.NewIntVar(0, H, f"e{i}_{d}")
            per_device[d].append(m.NewOptionalIntervalVar(s[i], int(dur[i, d]), end, x[i, d], f"iv{i}_{d}"))
            m.Add(makespan >= s[i] + int(dur[i, d])).OnlyEnforceIf(x[i, d])
    for d in range(D):
        m.AddNoOverlap(per_device[d])
    if len(classes) == 1 and len(classes[0]) == D:  # identical devices: a cumulative of all
        fixed = [m.NewIntervalVar(s[i], int(dur[i, 0]), s[i] + int(dur[i, 0]), f"c{i}") for i in range(n)]
        m.AddCumulative(fixed, [1] * n, D)
    same = {}
    for u, v, t in zip(g.edge_src.tolist(), g.edge_dst.tolist(), g.edge_tensor.tolist()):
        key = (u, v)
        if key not in same:
            same[key] = m.NewBoolVar(f"same{u}_{v}")
            for d in range(D):
                xu = x.get((u, d))
                xv = x.get((v, d))
                if xu is None and xv is None:
                    continue
                if xu is None or xv is None:
                    m.AddImplication(same[key], (xu if xv is None else xv).Not())
                else:
                    m.Add(xu == xv).OnlyEnforceIf(same[key])
        du = [(int(dur[u, d]), x[u, d]) for d in range(D) if (u, d) in x]
        end_u = sum(c * lit for c, lit in du)
        m.Add(s[v] >= s[u] + end_u + int(cost_t[t]) - int(cost_t[t]) * same[key])
    if np.isfinite(g.mem_capacity).any():
        for d in range(D):
            if np.isfinite(g.mem_capacity[d]):
                m.Add(sum(int(round(g.mem_bytes[i])) * x[i, d] for i in range(n) if (i, d) in x)
                      <= int(g.mem_capacity[d]))
    if g.colocate is not None:
        for cls in np.unique(g.colocate[g.colocate >= 0]):
            members = np.flatnonzero(g.colocate == cls).tolist()
            for a in members[1:]:
                for d in range(D):
                    if (a, d) in x and (members[0], d) in x:
                        m.Add(x[a, d] == x[members[0], d])
    for cls in classes:  # device cls[k+1] is first used after device cls[k]
        used_prev = None
        for k, d in enumerate(cls):
            used = []
            run_used = None
            for i in range(n):
                if (i, d) not in x:
                    used.append(run_used)
                    continue
                cur = m.NewBoolVar(f"u{i}_{d}")
                if run_used is None:
                    m.Add(cur == x[i, d])
                else:
                    m.AddMaxEquality(cur, [run_used, x[i, d]])
                run_used = cur
                used.append(cur)
                if k > 0:
                    before = used_prev[i - 1] if i > 0 else None
                    if before is None:
                        m.Add(x[i, d] == 0)
                    else:
                        m.AddImplication(x[i, d], before)
            used_prev = used
    floor = lower_bound(g, "parallel")
    m.Add(makespan >= int(np.floor(floor / unit)))
    m.Minimize(makespan)
    if start_p is not None and np.isfinite(start_value):
        p0 = _relabel(start_p, classes)
        st = sim.start_times(p0, "parallel")
        for i in range(n):
            m.AddHint(s[i], int(np.floor(st[i] / unit)))
            for d in range(D):
                if (i, d) in x:
                    m.AddHint(x[i, d], int(p0[i] == d))
        for (u, v), lit in same.items():
            m.AddHint(lit, int(p0[u] == p0[v]))

    best = {"p": start_p, "value": start_value, "found": 0}

    class _Score(cp_model.CpSolverSolutionCallback):
        def on_solution_callback(self) -> None:
            p = np.array([next(d for d in range(D) if (i, d) in x and self.Value(x[i, d]))
                          for i in range(n)], dtype=np.int64)
            res = sim.evaluate(p, "parallel")
            best["found"] += 1
            if res.feasible and res.value < best["value"]:
                best["p"], best["value"] = p, float(res.value)

    solver = cp_model.CpSolver()
    if time_limit is not None:  # CP-SAT: two thirds of what is left, then the polish
        left = float(time_limit) - (time.perf_counter() - t0)
        solver.parameters.max_time_in_seconds = max(0.1, left * 2 / 3)
    solver.parameters.num_search_workers = workers or min(8, os.cpu_count() or 1)
    solver.parameters.random_seed = int(seed)
    status = solver.Solve(m, _Score())
    name = solver.StatusName(status)
    bound = max(solver.BestObjectiveBound() * unit if status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
                else -np.inf, floor)
    polished = annealed = 0
    if best["p"] is not None and best["value"] < start_value:  # CP-SAT improved: polish its best
        until = t0 + float(time_limit) if time_limit is not None else time.perf_counter() + 60.0
        best["p"], best["value"], polished = polish(sim, best["p"], "parallel", until)
    before_anneal = best["value"]
    if time_limit is not None and best["p"] is not None and rel_gap(best["value"], bound) > PROOF_GAP:
        until = min(t0 + float(time_limit), time.perf_counter() + ANNEAL_MAX_S)
        best["p"], best["value"], annealed = anneal(sim, best["p"], "parallel", until, seed=seed)
    info = {"start": start_name, "heuristic_s": heuristic_value, "start_s": start_value,
            "solutions": best["found"], "moves_after": polished,
            "anneal_runs": annealed, "before_anneal_s": before_anneal,
            "cpsat_status": name, "cpsat_makespan_s": (solver.ObjectiveValue() * unit
                                                        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
                                                        else None),
            "unit_s": unit, "workers": solver.parameters.num_search_workers}
    value = sim.evaluate(best["p"], "parallel").value if best["p"] is not None else np.inf
    proven = status == cp_model.OPTIMAL and rel_gap(value, bound) <= PROOF_GAP
    return finish(g, objective, "cpsat", best["p"], t0, bound=bound, proven=proven,
                  status=f"CP-SAT {name} (bound over every schedule)", info=info)
