"""The sequential objective's path bound counts the skip connections a cut must send."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from envs.simulator import Simulator
from hsdag_core.costgraph import CostGraph
from hsdag_core.dnnpart import dnnpart_from_dict
from policies.solvers import path_bound
from policies.solvers.bounds import lower_bound
from policies.solvers.path_bound import sequential_bound


def best_sequential(g: CostGraph) -> float:
    sim = Simulator(g)
    return min(r.value for p in itertools.product(range(g.num_devices), repeat=g.num_nodes)
               if (r := sim.evaluate(np.array(p), "sequential")).feasible)


def make_input(nodes: list[dict], edges: list[tuple[int, int, float]], mem: float, accs: int) -> CostGraph:
    return dnnpart_from_dict({"maxSizePerFPGA": mem, "maxFPGAs": accs, "maxCPUs": 1, "nodes": nodes,
                              "edges": [{"sourceId": u, "destId": v, "cost": c} for u, v, c in edges]})


def test_a_cut_inside_a_skip_connection_pays_its_tensor():
    # 0 -> 1 -> 2 -> 3 with skips 0 -> 2 and 1 -> 3: two accelerators of memory 8 hold two
    # nodes each, so the chain is cut once; each cut sends a path tensor (1) and a skip (10)
    nodes = [{"id": i, "supportedOnFpga": 1, "cpuLatency": 100.0, "fpgaLatency": 1.0,
              "isBackwardNode": 0, "size": 4.0} for i in range(4)]
    cost = {0: 10.0, 1: 1.0, 2: 1.0}          # one tensor per producer: 1 feeds 2 and 3
    edges = [(0, 1, cost[0]), (1, 2, cost[1]), (2, 3, cost[2]), (0, 2, cost[0]), (1, 3, cost[1])]
    g = make_input(nodes, edges, mem=8.0, accs=2)
    best = best_sequential(g)
    assert sequential_bound(g) == pytest.approx(best, rel=1e-12)
    # the compute alone, and a cut paying only the path's tensor, are well below it
    assert lower_bound(g, "sequential") + 2 * 1e-3 < best


def test_a_skip_over_a_small_segment_pays_when_the_segments_around_it_cannot_share():
    # 0 -> 1 -> 2 -> 3 -> 4 with a skip 0 -> 3 carrying a large tensor; 0, 1, 3 and 4 fill
    # an accelerator two by two and 2 holds nothing. Cutting before and after 2 costs two
    # small tensors, but {0, 1} and {3, 4} cannot share a device, so the skip is sent too
    nodes = [{"id": i, "supportedOnFpga": 1, "cpuLatency": 100.0, "fpgaLatency": 1.0,
              "isBackwardNode": 0, "size": s} for i, s in enumerate([4.0, 4.0, 0.0, 4.0, 4.0])]
    cost = {0: 10.0, 1: 0.1, 2: 0.1, 3: 10.0}      # one tensor per producer: 0 feeds 1 and 3
    edges = [(0, 1, cost[0]), (1, 2, cost[1]), (2, 3, cost[2]), (3, 4, cost[3]), (0, 3, cost[0])]
    g = make_input(nodes, edges, mem=8.0, accs=2)
    best = best_sequential(g)
    assert best == pytest.approx(15.1e-3)
    assert sequential_bound(g) == pytest.approx(best, rel=1e-12)


def test_the_other_branch_of_a_module_must_leave_a_full_device(monkeypatch):
    # an Inception-like module: 0 -> 1 -> 4 on the path, and a branch 0 -> 2 -> 3 -> 4 off it,
    # then 4 -> 5. The path fills all but 1 of an accelerator's memory and the branch holds 2,
    # so something must leave. Node 3 alone (it feeds the path) fits in what is left and the
    # path-only terms cut nothing; counting the branch, at least 1 must leave and its
    # cheapest eviction, per byte, is half of 3's group (3 with 2 behind it, sending 3's tensor)
    sizes = [2.0, 3.0, 1.0, 1.0, 1.0, 1.0]
    nodes = [{"id": i, "supportedOnFpga": 1, "cpuLatency": 20.0, "fpgaLatency": 3.0 if i == 1 else 1.0,
              "isBackwardNode": 0, "size": s} for i, s in enumerate(sizes)]
    cost = {0: 10.0, 1: 20.0, 2: 10.0, 3: 5.0, 4: 10.0}
    edges = [(0, 1, cost[0]), (0, 2, cost[0]), (1, 4, cost[1]), (2, 3, cost[2]), (3, 4, cost[3]),
             (4, 5, cost[4])]
    g = make_input(nodes, edges, mem=8.0, accs=2)
    best = best_sequential(g)
    with_branches = sequential_bound(g)
    monkeypatch.setattr(path_bound, "_branches",
                        lambda g, P, base, mem, devs, off: np.zeros((len(devs), P.size, P.size)))
    without = sequential_bound(g)
    assert without == pytest.approx(lower_bound(g, "sequential"))      # the path alone cuts nothing
    assert with_branches == pytest.approx(without + 2.5e-3)
    assert with_branches <= best + 1e-12
    assert best == pytest.approx(without + 10e-3)                       # node 0 or 5 on the other device


def branchy(seed: int, n: int, colocate: bool = False) -> CostGraph:
    """A random DAG with branches off any path, two accelerators and a slow CPU: nodes of
    random size, some not supported on the accelerators, tensors of random cost (some
    free), with ``colocate`` random co-location classes."""
    rng = np.random.default_rng(seed)
    nodes = [{"id": i, "supportedOnFpga": int(rng.random() > 0.1), "cpuLatency": float(rng.uniform(1, 20)),
              "fpgaLatency": float(rng.uniform(0.1, 2)), "isBackwardNode": 0,
              "size": float(rng.choice([0.0, 1.0, 2.0, 4.0]))} for i in range(n)]
    if colocate:
        for nd in nodes:
            nd["colorClass"] = int(rng.integers(0, n - 2))
    pairs = set()
    for v in range(1, n):
        for u in rng.choice(v, size=min(1 + int(rng.random() < 0.4), v), replace=False):
            pairs.add((int(u), v))
    for u in range(n - 1):                       # every node feeds another: one sink
        if not any(p[0] == u for p in pairs):
            pairs.add((u, int(rng.integers(u + 1, n))))
    cost = rng.uniform(0, 6, size=n) * (rng.random(n) < 0.85)
    return make_input(nodes, [(u, v, float(cost[u])) for u, v in sorted(pairs)],
                  mem=float(rng.uniform(3, 8)), accs=2)


@pytest.mark.parametrize("seed", range(6))
def test_the_bound_is_below_every_placement_of_a_dag_with_branches(seed):
    g = branchy(seed, 7)
    assert sequential_bound(g) <= best_sequential(g) + 1e-12


def _residual(seed: int, n: int, accs: int) -> CostGraph:
    """A random chain with skip connections, a slow CPU and accelerators whose memory binds."""
    rng = np.random.default_rng(seed)
    nodes = [{"id": i, "supportedOnFpga": int(rng.random() > 0.1), "cpuLatency": float(rng.uniform(1, 10)),
              "fpgaLatency": float(rng.uniform(0.1, 2)), "isBackwardNode": 0,
              "size": float(rng.uniform(0, 4))} for i in range(n)]
    pairs = {(v - 1, v) for v in range(1, n)}
    for v in range(2, n):
        if rng.random() < 0.6:
            pairs.add((int(rng.integers(0, v - 1)), v))
    cost = rng.uniform(0, 6, size=n)
    return make_input(nodes, [(u, v, float(cost[u])) for u, v in sorted(pairs)],
                  mem=float(rng.uniform(4, 9)), accs=accs)


@pytest.mark.parametrize("exact", [16, 2])
@pytest.mark.parametrize("seed,accs", [(s, 2 + s % 2) for s in range(8)])
def test_the_bound_is_below_every_placement_of_a_residual_chain(seed, accs, exact, monkeypatch):
    # exact=2: the remembered lengths go in steps from 2 positions on
    monkeypatch.setattr(path_bound, "EXACT_LENGTHS", exact)
    g = _residual(seed, 7, accs)
    assert sequential_bound(g) <= best_sequential(g) + 1e-12
