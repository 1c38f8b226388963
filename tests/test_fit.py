"""Whether a placement fits the devices, and the repair rule (hsdag_core.fit)."""
import itertools

import numpy as np
import pytest

from hsdag_core.costgraph import CostGraph
from hsdag_core.fit import feasible, repair, violation


def chain(compute, mem, cap, boundary_s=0.0, colocate=None) -> CostGraph:
    """A chain of nodes, one tensor per edge."""
    compute = np.asarray(compute, dtype=float)
    n, D = compute.shape
    return CostGraph(names=[f"n{i}" for i in range(n)], devices=[f"D{d}" for d in range(D)],
                     compute_s=compute, tensor_src=np.arange(n - 1), tensor_bytes=np.ones(n - 1),
                     edge_src=np.arange(n - 1), edge_dst=np.arange(1, n), edge_tensor=np.arange(n - 1),
                     link_latency_s=np.zeros((D, D)), link_bandwidth_Bps=np.full((D, D), 1e9),
                     boundary_s=boundary_s, mem_bytes=np.asarray(mem, dtype=float),
                     mem_capacity=np.asarray(cap, dtype=float), colocate=colocate)


def test_a_feasible_placement_is_kept_as_it_is():
    g = chain([[2, 1]] * 4, [1, 1, 1, 1], [np.inf, 2])
    p = np.array([0, 1, 1, 0])
    assert feasible(g, p)
    assert np.array_equal(repair(g, p), p)


def test_an_overflowing_device_sheds_the_cheapest_nodes():
    # device 1 holds 2 of 7 bytes: node 0 (5 bytes, 0.1 s slower on device 0) or nodes 1
    # and 2 (10.1 s slower together) must leave
    g = chain([[1.1, 1.0], [1.1, 1.0], [11.0, 1.0]], [5, 1, 1], [np.inf, 2])
    p = np.array([1, 1, 1])
    assert "over its memory" in violation(g, p)
    fixed = repair(g, p)
    assert feasible(g, fixed)
    assert fixed.tolist() == [0, 1, 1]
    assert (g.memory_use(fixed) <= g.mem_capacity).all()


def test_a_large_node_moved_onto_a_full_device_exchanges_for_smaller_ones():
    # nodes 0 and 1 (8 + 4 bytes) fill 12 of device 1's 20; the proposal adds node 2
    # (18 bytes). Moving nodes 0 and 1 off costs 0.65 + 1.45 s, node 2 back 2.6 s: the
    # repair makes the exchange (the cheapest-per-byte rule, node 0 then node 2 off,
    # cost 3.25 s and undid the proposal)
    g = chain([[1.65, 1.0], [2.45, 1.0], [3.6, 1.0]], [8, 4, 18], [np.inf, 20])
    assert feasible(g, [1, 1, 0]) and not feasible(g, [1, 1, 1])
    assert repair(g, np.array([1, 1, 1])).tolist() == [0, 0, 1]


def _cheapest_by_enumeration(g, p):
    """The least summed extra compute time (moves that save time priced 0) of moving
    nodes off overflowing devices until every device fits, by trying every set."""
    over = g.memory_use(p) > g.mem_capacity
    movable = [i for i in range(g.num_nodes) if over[p[i]] and g.mem_bytes[i] > 0]
    best = np.inf
    for targets in itertools.product(range(g.num_devices), repeat=len(movable)):
        q = p.copy()
        q[movable] = targets
        if feasible(g, q):
            extra = g.compute_s[movable, targets] - g.compute_s[movable, p[movable]]
            best = min(best, np.maximum(extra, 0).sum())
    return best


def test_the_repair_is_the_cheapest_set_of_moves_on_random_graphs():
    # (the per-byte rule was dearer than the cheapest set on 4 of these 25)
    rng = np.random.default_rng(0)
    for _ in range(25):
        n, D = 7, int(rng.integers(2, 4))
        g = chain(rng.uniform(0.5, 3.0, (n, D)), rng.integers(1, 9, n).astype(float),
                  [np.inf] + list(rng.integers(8, 16, D - 1).astype(float)))
        p = rng.integers(1, D, n)  # everything on the devices with limited memory
        fixed = repair(g, p)
        best = _cheapest_by_enumeration(g, p)
        if not np.isfinite(best):
            assert fixed is None
            continue
        assert feasible(g, fixed)
        moved = np.flatnonzero(fixed != p)
        extra = g.compute_s[moved, fixed[moved]] - g.compute_s[moved, p[moved]]
        assert np.maximum(extra, 0).sum() == pytest.approx(best, abs=1e-9)


def test_boundaries_count_in_the_price_of_a_move():
    # nodes 0 and 4 are equally cheap to move; only moving node 0 adds no middle boundary
    g = chain([[1.5, 1.0]] * 5, [1] * 5, [np.inf, 4], boundary_s=1.0)
    fixed = repair(g, np.ones(5, dtype=np.int64))
    assert fixed.tolist() in ([0, 1, 1, 1, 1], [1, 1, 1, 1, 0])
    # without boundary costs any node may go; with them a node in the middle never does
    g2 = chain([[1.5, 1.0], [1.5, 1.0], [1.4, 1.0], [1.5, 1.0], [1.5, 1.0]], [1] * 5, [np.inf, 4],
               boundary_s=1.0)
    assert repair(g2, np.ones(5, dtype=np.int64)).tolist() in ([0, 1, 1, 1, 1], [1, 1, 1, 1, 0])
    g3 = chain(g2.compute_s, [1] * 5, [np.inf, 4], boundary_s=0.0)
    assert repair(g3, np.ones(5, dtype=np.int64)).tolist() == [1, 1, 0, 1, 1]


def test_boundaries_are_priced_for_the_set_of_moves_together():
    # two of six nodes must leave device 1; moving two neighbours at an end adds one
    # boundary, any other pair two or more (priced one move at a time, the end nodes
    # 0 and 5 looked cheapest: one boundary each)
    g = chain([[1.5, 1.0]] * 6, [1] * 6, [np.inf, 4], boundary_s=1.0)
    fixed = repair(g, np.ones(6, dtype=np.int64))
    assert fixed.tolist() in ([0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0])
    # a node holding no bytes between two that leave goes with them rather than stay
    # alone on the device as a stage of its own
    g2 = chain([[1.5, 1.0], [1.1, 1.0], [1.5, 1.0], [9.0, 1.0], [9.0, 1.0]], [1, 0, 1, 1, 1],
               [np.inf, 2], boundary_s=1.0)
    assert repair(g2, np.ones(5, dtype=np.int64)).tolist() == [0, 0, 0, 1, 1]


def test_transfers_count_in_the_price_of_a_move():
    # one of five nodes must leave device 1; node 2 is the cheapest to run elsewhere (0.5 s
    # slower) but its input and output take 1 s each to send across, so an end node (1 s
    # slower, small tensors) is cheaper in all (the rule before, blind to transfers, moved
    # node 2: 2.5 s where 1 s would do)
    g = chain([[2.0, 1.0], [2.0, 1.0], [1.5, 1.0], [2.0, 1.0], [2.0, 1.0]], [1] * 5, [np.inf, 4])
    g.tensor_bytes[:] = [1.0, 1e9, 1e9, 1.0]
    fixed = repair(g, np.ones(5, dtype=np.int64))
    assert fixed.tolist() in ([0, 1, 1, 1, 1], [1, 1, 1, 1, 0])


def test_the_repair_prices_compute_transfers_and_boundaries_together_on_random_graphs():
    """Against every set of moves: the repaired placement's extra compute (a move that saves
    time priced 0) plus its transfer and boundary time is the least any fitting set gives."""
    from envs.simulator import Simulator

    rng = np.random.default_rng(1)
    for _ in range(20):
        n = 7
        g = chain(rng.uniform(0.5, 3.0, (n, 2)), rng.integers(1, 9, n).astype(float),
                  [np.inf, float(rng.integers(8, 16))], boundary_s=float(rng.uniform(0, 0.5)))
        g.tensor_bytes[:] = rng.uniform(0, 1e9, n - 1)  # up to 1 s per tensor at 1 GB/s
        sim, p = Simulator(g), np.ones(n, dtype=np.int64)

        def price(q):
            extra = g.compute_s[np.arange(n), q] - g.compute_s[np.arange(n), p]
            r = sim.sequential(q).breakdown
            return np.maximum(extra, 0).sum() + r["transfer_s"] + r["boundary_s"]

        sets = [np.array(q) for q in itertools.product((0, 1), repeat=n) if feasible(g, np.array(q))]
        fixed = repair(g, p)
        assert feasible(g, fixed)
        # HiGHS adds 1e-3 of a mean move's cost per move, to prefer fewer moves on a tie
        assert price(fixed) == pytest.approx(min(price(q) for q in sets), abs=0.02)


def test_nodes_leave_devices_that_cannot_run_them_and_classes_stay_together():
    g = chain([[1, np.inf], [1, 1], [1, 1]], [0, 1, 1], [np.inf, np.inf], colocate=np.array([-1, 3, 3]))
    p = np.array([1, 0, 1])
    assert "cannot run" in violation(g, p)
    fixed = repair(g, p)
    assert feasible(g, fixed) and fixed[0] == 0 and fixed[1] == fixed[2]


def test_no_placement_when_the_devices_cannot_hold_the_graph():
    g = chain([[1, 1]] * 3, [2, 2, 2], [3, 2])
    assert repair(g, np.array([1, 1, 1])) is None


def test_a_repair_given_no_time_to_search_still_fits_and_the_start_gets_longer(monkeypatch):
    """``time_limit`` bounds HiGHS's search; with none left the per-byte rule still makes the
    placement fit. The start of a run (once per run) is given START_REPAIR_S, not the 2 s of
    a proposal's repair."""
    import envs.incumbent as inc
    from hsdag_core.synthetic import random_cost_graph

    g = random_cost_graph(400, seed=3)
    g.mem_bytes = np.random.default_rng(3).uniform(1, 10, g.num_nodes)
    g.mem_capacity = np.array([np.inf, 0.5 * g.mem_bytes.sum()])
    p = np.ones(g.num_nodes, dtype=np.int64)
    assert not feasible(g, p)
    assert feasible(g, repair(g, p, time_limit=1e-4)) and feasible(g, repair(g, p))
    limits = []
    import hsdag_core.fit as fit

    monkeypatch.setattr(fit, "repair", lambda graph, q, time_limit=2.0: limits.append(time_limit) or repair(graph, q))
    start = inc.start_placement(g.num_nodes, g.devices, {}, g)
    assert feasible(g, start) and limits == [inc.START_REPAIR_S] * 2 and inc.START_REPAIR_S >= 10
