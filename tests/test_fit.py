"""Whether a placement fits the devices, and the repair rule (hsdag_ray.core.fit)."""
import numpy as np

from hsdag_ray.core.costgraph import CostGraph
from hsdag_ray.core.fit import feasible, repair, violation


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


def test_an_overflowing_device_sheds_the_nodes_cheapest_per_byte():
    # device 1 holds 2 of 7 bytes: node 0 (5 bytes, 0.1 s slower on device 0) and node 1
    # (1 byte, 0.1 s slower) must leave, node 2 (1 byte, 10 s slower) stays
    g = chain([[1.1, 1.0], [1.1, 1.0], [11.0, 1.0]], [5, 1, 1], [np.inf, 2])
    p = np.array([1, 1, 1])
    assert "over its memory" in violation(g, p)
    fixed = repair(g, p)
    assert feasible(g, fixed)
    assert fixed.tolist() == [0, 1, 1]  # freeing 5 bytes costs 0.02 s per byte; node 1 stays
    assert (g.memory_use(fixed) <= g.mem_capacity).all()


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


def test_nodes_leave_devices_that_cannot_run_them_and_classes_stay_together():
    g = chain([[1, np.inf], [1, 1], [1, 1]], [0, 1, 1], [np.inf, np.inf], colocate=np.array([-1, 3, 3]))
    p = np.array([1, 0, 1])
    assert "cannot run" in violation(g, p)
    fixed = repair(g, p)
    assert feasible(g, fixed) and fixed[0] == 0 and fixed[1] == fixed[2]


def test_no_placement_when_the_devices_cannot_hold_the_graph():
    g = chain([[1, 1]] * 3, [2, 2, 2], [3, 2])
    assert repair(g, np.array([1, 1, 1])) is None
