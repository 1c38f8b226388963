"""Exact methods equal the brute-force optimum; heuristics are never below it.

Brute force enumerates every placement of small random DAGs (6-10 nodes, 2-3
devices) and evaluates each with the simulator, the reference for every
objective.
"""
import dataclasses
import itertools
import json

import networkx as nx
import numpy as np
import pytest

from envs.simulator import Simulator
from hsdag_core.costgraph import CostGraph
from hsdag_core.synthetic import random_cost_graph
from policies.solvers.bounds import lower_bound
from policies.solvers.exact import SOLVERS, solve
from policies.solvers.ideals import contiguity, solve_dp
from policies.solvers.mincut import expansion_move

OBJ = ("sequential", "throughput", "parallel", "latency")


def random_dag(seed: int, n: int = 8, D: int = 2, mem: bool = False, boundary: float = 0.0,
               uniform: bool = True, coloc: bool = False, unsupported: bool = False,
               fanout: bool = False, twin: bool = False) -> CostGraph:
    """A random DAG in topological order, one tensor per producing node.

    ``uniform``: one transfer time per tensor; otherwise asymmetric link
    latency / bandwidth matrices (direction-dependent costs). ``twin``: the
    last device is a copy of the one before (interchangeable devices).
    """
    rng = np.random.default_rng(seed)
    src, dst = [], []
    for v in range(1, n):
        k = int(rng.integers(1, min(3, v) + 1))
        for u in sorted(rng.choice(v, size=k, replace=False)):
            src.append(int(u))
            dst.append(v)
    if fanout:  # node 0 feeds every other node: its tensor reaches many devices
        pairs = sorted(set(zip(src, dst)) | {(0, v) for v in range(1, n)})
        src, dst = [p[0] for p in pairs], [p[1] for p in pairs]
    producers = sorted(set(src))
    tid = {u: i for i, u in enumerate(producers)}
    comp = rng.uniform(0.1, 2.0, (n, D))
    if unsupported:
        comp[rng.random((n, D)) < 0.2] = np.inf
        comp[np.isinf(comp).all(axis=1), 0] = 1.0
    if twin:
        comp[:, -1] = comp[:, -2]
    kw: dict = {}
    if uniform:
        kw["tensor_transfer_s"] = rng.uniform(0.0, 1.5, len(producers))
    else:
        kw["link_latency_s"] = rng.uniform(0.0, 0.5, (D, D))
        kw["link_bandwidth_Bps"] = rng.uniform(1.0, 4.0, (D, D))
    if mem:
        kw["mem_bytes"] = rng.uniform(0.0, 1.0, n)
        kw["mem_capacity"] = np.array([np.inf] + [0.3 * n] * (D - 1))
        if twin:
            kw["mem_capacity"][-1] = kw["mem_capacity"][-2]
    if coloc:
        c = np.full(n, -1)
        c[rng.choice(n, 3, replace=False)] = 0
        kw["colocate"] = c
    return CostGraph(names=[f"n{i}" for i in range(n)], devices=[f"D{d}" for d in range(D)],
                     compute_s=comp, tensor_src=producers,
                     tensor_bytes=rng.uniform(1.0, 4.0, len(producers)), edge_src=src,
                     edge_dst=dst, edge_tensor=[tid[u] for u in src], boundary_s=boundary,
                     name=f"random{seed}", **kw)


def placements(g: CostGraph):
    for p in itertools.product(range(g.num_devices), repeat=g.num_nodes):
        p = np.array(p)
        if np.isfinite(g.compute_s[np.arange(g.num_nodes), p]).all():
            yield p


def is_contiguous(cg, p: np.ndarray) -> bool:
    """Groups on one device each and an acyclic quotient of the precedence DAG."""
    dev: dict[int, int] = {}
    for i, gi in enumerate(cg.group):
        if dev.setdefault(int(gi), int(p[i])) != p[i]:
            return False
    q = nx.DiGraph()
    q.add_edges_from((dev[a], dev[b]) for a, b in cg.edges if dev[a] != dev[b])
    return nx.is_directed_acyclic_graph(q)


def paper_load(g: CostGraph, p: np.ndarray) -> float:
    """The DP's load model: a tensor counts once on its sender, once per receiver."""
    D = g.num_devices
    load = np.bincount(p, weights=g.compute_s[np.arange(g.num_nodes), p], minlength=D)
    for t in range(g.num_tensors):
        u = g.tensor_src[t]
        dests = set(p[g.edge_dst[g.edge_tensor == t]].tolist()) - {p[u]}
        if dests:
            load[p[u]] += g.tensor_transfer_s[t]
            for d in dests:
                load[d] += g.tensor_transfer_s[t]
    return float(load.max())


def brute_force(g: CostGraph) -> dict:
    sim = Simulator(g)
    cg = contiguity(g, merge_leaves=False)
    best = {o: np.inf for o in OBJ}
    best["contig"] = best["contig_paper"] = np.inf
    for p in placements(g):
        for o in OBJ:
            r = sim.evaluate(p, o)
            if not r.feasible:
                break
            best[o] = min(best[o], r.value)
            if o == "throughput" and is_contiguous(cg, p):
                best["contig"] = min(best["contig"], r.value)
                if g.tensor_transfer_s is not None:
                    best["contig_paper"] = min(best["contig_paper"], paper_load(g, p))
    return best


def close(a: float, b: float) -> bool:
    return a == b or bool(np.isclose(a, b, rtol=1e-7, atol=1e-9))


CASES = [dict(seed=s, n=n, D=D, mem=mem, boundary=b, uniform=u, coloc=c, unsupported=us,
              fanout=f, twin=tw)
         for s, (n, D, mem, b, u, c, us, f, tw) in enumerate([
             (6, 2, False, 0.0, True, False, False, False, False),
             (8, 2, False, 0.3, True, False, False, False, False),
             (10, 2, True, 0.0, True, False, False, False, False),
             (9, 2, False, 0.2, False, False, False, False, False),
             (8, 2, True, 0.4, False, True, False, False, False),
             (8, 2, False, 0.0, True, False, True, True, False),
             (10, 2, True, 0.1, True, True, True, False, False),
             (6, 3, False, 0.0, True, False, False, False, False),
             (7, 3, True, 0.3, True, False, False, False, False),
             (7, 3, False, 0.2, False, False, False, True, False),
             (8, 3, True, 0.0, True, True, False, True, False),
             (7, 3, False, 0.5, False, True, True, False, False),
             (7, 3, False, 0.3, True, False, False, True, True),     # twins, unlimited memory
             (7, 3, True, 0.2, True, False, False, False, True),     # twins with a memory limit
         ])]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: "seed{seed}-n{n}-D{D}".format(**c))
def case(request):
    g = random_dag(**request.param)
    return g, brute_force(g)


def test_exact_methods_equal_brute_force(case):
    g, best = case
    for name, spec in SOLVERS.items():
        for obj in spec.exact:
            if name == "mincut" and g.num_devices != 2:
                continue
            r = solve(g, obj, name, time_limit=60)
            opt = best["contig"] if spec.scope == "contiguous" else best[obj]
            if not np.isfinite(opt):                    # nothing fits: no placement
                assert not r.feasible and not r.optimal
                continue
            if name == "mincut" and not r.feasible:     # memory binds: the cut is a bound
                assert r.bound <= opt + 1e-9
                continue
            assert r.optimal, (name, obj, r.status)
            assert close(r.value, opt), (name, obj, r.value, opt)
            assert r.bound <= r.value + 1e-9


def test_mincut_energy_is_the_sequential_objective(case):
    g, best = case
    if g.num_devices != 2:
        pytest.skip("two devices")
    energy, p = expansion_move(g, np.zeros(g.num_nodes, dtype=np.int64), 1)
    assert close(energy, Simulator(g).evaluate(p, "sequential").value)
    assert energy <= best["sequential"] + 1e-9


def test_dp_is_exact_for_its_load_model(case):
    g, best = case
    if g.tensor_transfer_s is None:
        with pytest.raises(ValueError, match="milp-contig"):
            solve_dp(g)
        return
    r = solve_dp(g)
    assert close(r.info["dp_value_s"], best["contig_paper"])
    # its split under the simulator: never below the contiguous optimum, which it bounds
    assert r.bound <= best["contig"] + 1e-9
    if np.isfinite(best["contig"]):
        assert r.value >= best["contig"] - 1e-9
    if r.optimal:
        assert close(r.value, r.bound)


def test_heuristics_never_beat_the_optimum(case):
    g, best = case
    for name, spec in SOLVERS.items():
        for obj in spec.objectives:
            if obj in spec.exact or (name == "mincut"):
                continue
            if name == "dp" and g.tensor_transfer_s is None:
                continue    # needs device-independent transfers (see test above)
            r = solve(g, obj, name, time_limit=60)
            opt = best["contig"] if spec.scope == "contiguous" else best[obj]
            if r.feasible:
                assert r.value >= opt - 1e-9, (name, obj)
            assert r.bound <= opt + 1e-9, (name, obj)
            assert lower_bound(g, obj) <= opt + 1e-9


def test_parallel_milp_brackets_the_optimum(case):
    g, best = case
    r = solve(g, "parallel", "milp", time_limit=60)
    assert r.bound <= best["parallel"] + 1e-9 <= r.value + 2e-9
    assert r.info["mip_objective_s"] <= r.value + 1e-9


@pytest.mark.parametrize("objective", ["sequential", "throughput"])
def test_milp_never_returns_worse_than_its_start(objective):
    """Stopped before it improves on its start (a time limit HiGHS cannot even presolve
    in) the MILP returns the start; given time, it returns the optimum, never worse; and
    its bound is a bound: value >= bound, gap = (value - bound) / value."""
    from policies.solvers.milp import solve_milp_throughput
    from policies.solvers.milp_sequential import solve_milp_sequential

    milp = solve_milp_sequential if objective == "sequential" else solve_milp_throughput
    n, D = (40, 4) if objective == "sequential" else (14, 3)
    g = random_cost_graph(n, devices=D, seed=3)
    g = dataclasses.replace(g, mem_capacity=np.array([np.inf, 0.3, 0.3, np.inf][:D])
                            * g.mem_bytes.sum())
    sim = Simulator(g)
    start = solve(g, objective, "m-etf").placement   # a fitting placement, far from optimal
    assert sim.check(start) is None
    start_v = sim.evaluate(start, objective).value
    for limit in (1e-3, 30.0):
        r = milp(g, objective, time_limit=limit, start=start)
        assert r.feasible and r.info["start_accepted"]
        assert r.value <= start_v * (1 + 1e-12)
        assert r.value >= r.bound - 1e-12
        assert r.gap == pytest.approx((r.value - r.bound) / r.value)
        assert r.bound >= lower_bound(g, objective) - 1e-15
    assert r.value < start_v     # with time it improves on m-ETF


def test_a_short_sequential_milp_starts_from_its_rounded_relaxation():
    """Given under PATH_BOUND_FROM_S seconds on a graph with a memory limit, the sequential
    MILP rounds its LP relaxation into a placement (each node on its device of largest
    share, repaired to fit, then single-node moves) and starts from it when it beats the
    start it was given: here the rounding is the optimum, which m-ETF's start misses."""
    from policies.solvers.milp_sequential import PATH_BOUND_FROM_S, solve_milp_sequential

    g = random_cost_graph(40, devices=4, seed=3)
    g = dataclasses.replace(g, mem_capacity=np.array([np.inf, 0.3, 0.3, np.inf]) * g.mem_bytes.sum())
    sim = Simulator(g)
    start = solve(g, "sequential", "m-etf").placement
    start_v = sim.evaluate(start, "sequential").value
    best = solve_milp_sequential(g, time_limit=30.0, start=start)
    assert best.optimal and best.value < start_v * 0.99
    short = solve_milp_sequential(g, time_limit=min(2.0, PATH_BOUND_FROM_S / 2), start=start)
    assert short.info["lp_rounded_s"] == pytest.approx(best.value, rel=1e-9)
    assert short.info["start_s"] == pytest.approx(best.value, rel=1e-9)  # the rounding was the start
    assert short.value == pytest.approx(best.value, rel=1e-9)
    assert "lp_rounded_s" not in best.info  # a long solve has time for its own search


def test_milp_starts_from_the_best_heuristic():
    """Without a start the sequential MILP starts from the best of the heuristics, so
    what it returns is never worse than alpha-expansion's placement."""
    g = random_dag(3, n=9, D=3, mem=True, boundary=0.2)
    alpha = solve(g, "sequential", "alpha-expansion")
    r = solve(g, "sequential", "milp", time_limit=1e-3)
    assert r.info["start_s"] <= alpha.value + 1e-12
    assert r.value <= alpha.value + 1e-12 and r.value >= r.bound - 1e-12


def test_alpha_expansion_keeps_memory_feasibility():
    g = random_dag(3, n=9, D=3, mem=True, boundary=0.2)
    r = solve(g, "sequential", "alpha-expansion")
    assert r.feasible
    assert r.info["rounds"] >= 1


def test_infeasible_problem_reports_no_placement():
    g = random_dag(1, n=6, D=2, mem=True)
    g.mem_capacity = np.array([0.01, 0.01])
    for method in ("milp", "mincut"):
        r = solve(g, "sequential", method)
        assert not r.feasible and not r.optimal
    r = solve(g, "throughput", "dp")
    assert not r.feasible and "no contiguous split" in r.status


def test_unknown_names_are_value_errors():
    g = random_dag(0)
    with pytest.raises(ValueError, match="unknown method"):
        solve(g, "sequential", "magic")
    with pytest.raises(ValueError, match="unknown objective"):
        solve(g, "fast", "milp")
    with pytest.raises(ValueError, match="does not solve the parallel"):
        solve(g, "parallel", "dp")
    with pytest.raises(ValueError, match="two devices"):
        solve(random_dag(0, D=3), "sequential", "mincut")


def test_result_to_dict_is_json(case):
    g, _ = case
    r = solve(g, "sequential", "single")
    d = json.loads(json.dumps(r.to_dict(g)))
    assert set(d["placement"]) == set(g.names)
    assert d["method"] == "single"


def test_sequential_path_bound_is_below_the_optimum(case):
    from policies.solvers.path_bound import sequential_bound

    g, best = case
    assert sequential_bound(g) <= best["sequential"] + 1e-9
