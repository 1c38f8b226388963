"""Hand-computed simulator values on small DAGs, for every objective."""
import numpy as np
import pytest

from envs.simulator import Simulator, SimulatorBackend
from hsdag_core.costgraph import CostGraph, InvalidCostGraph


def diamond(**kw) -> CostGraph:
    """0 -> {1, 2} -> 3. Tensor 0 (from node 0) feeds nodes 1 and 2."""
    args = dict(
        names=["a", "b", "c", "d"], devices=["A", "B"],
        compute_s=[[1, 2], [4, 1], [3, 3], [1, 1]],
        tensor_src=[0, 1, 2], tensor_bytes=[8, 4, 4],
        edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3], edge_tensor=[0, 0, 1, 2],
        tensor_transfer_s=[0.5, 0.25, 0.25], boundary_s=0.1)
    args.update(kw)
    return CostGraph(**args)


def test_sequential_by_hand():
    sim = Simulator(diamond())
    r = sim.evaluate([0, 1, 0, 0], "sequential")
    # compute 1+1+3+1, tensor 0 to B once, tensor 1 back to A, two boundaries
    assert r.value == pytest.approx(6 + 0.5 + 0.25 + 2 * 0.1)
    assert r.breakdown["stages"] == 3
    # both consumers of tensor 0 on B: it is sent once
    r = sim.evaluate([0, 1, 1, 0], "sequential")
    assert r.value == pytest.approx(1 + 1 + 3 + 1 + 0.5 + 0.25 + 0.25 + 2 * 0.1)
    assert r.breakdown["crossings"] == 3
    assert sim.evaluate([0, 0, 0, 0], "sequential").value == pytest.approx(9)
    assert sim.evaluate([1, 1, 1, 1], "sequential").value == pytest.approx(7)


def test_parallel_by_hand():
    sim = Simulator(diamond())
    # a on A [0,1]; t0 reaches B at 1.5; b on B [1.5,2.5]; c on A [1,4];
    # d waits for c (4) and t1 (2.5 + 0.25): runs [4,5]
    assert sim.evaluate([0, 1, 0, 0], "parallel").value == pytest.approx(5.0)
    # all on one device: the sum of compute
    assert sim.evaluate([0, 0, 0, 0], "parallel").value == pytest.approx(9.0)
    # b and c on B after one transfer: a [0,1], b [1.5,2.5], c [2.5,5.5], d on A at 5.75
    assert sim.evaluate([0, 1, 1, 0], "parallel").value == pytest.approx(6.75)


def test_parallel_device_runs_first_come_first_served():
    # two independent chains on one device interleave by readiness, not index
    g = CostGraph(names=["x", "y", "z"], devices=["A", "B"],
                  compute_s=[[5, 1], [1, 1], [1, 1]],
                  tensor_src=[0], tensor_bytes=[1], edge_src=[0], edge_dst=[2], edge_tensor=[0],
                  tensor_transfer_s=[0.0])
    # x on A [0,5]; y on A waits until 5 -> [5,6]; z on B after x -> [5,6]
    assert Simulator(g).evaluate([0, 0, 1], "parallel").value == pytest.approx(6.0)


def test_throughput_by_hand():
    sim = Simulator(diamond())
    r = sim.evaluate([0, 1, 0, 0], "throughput")
    # A: 1+3+1 compute, sends t0 (0.5), receives t1 (0.25); B: 1 + 0.5 + 0.25
    assert r.value == pytest.approx(5.75)
    assert r.breakdown["load_B_s"] == pytest.approx(1.75)


def test_link_model_latency_plus_bytes_over_bandwidth():
    g = diamond(tensor_transfer_s=None, link_latency_s=[[0, 0.1], [0.1, 0]],
                link_bandwidth_Bps=[[np.inf, 4.0], [4.0, np.inf]])
    t = g.transfer_s()
    assert t[0, 0, 1] == pytest.approx(0.1 + 8 / 4)
    assert t[0, 0, 0] == 0
    assert Simulator(g).evaluate([0, 1, 0, 0], "sequential").value == pytest.approx(
        6 + 2.1 + 1.1 + 0.2)


def test_memory_limit_is_reported():
    g = diamond(mem_bytes=[0, 10, 0, 0], mem_capacity=[np.inf, 5])
    sim = Simulator(g)
    r = sim.evaluate([0, 1, 0, 0], "sequential")
    assert not r.feasible and "memory" in r.violation and "B" in r.violation
    assert sim.evaluate([0, 0, 0, 0], "sequential").feasible
    m = SimulatorBackend(g).measure({"a": "A", "b": "B", "c": "A", "d": "A"})
    assert not m.ok and m.stage == "memory"


def test_unsupported_device_and_colocation():
    g = diamond(compute_s=[[1, 2], [4, np.inf], [3, 3], [1, 1]], colocate=[0, 1, 1, -1])
    sim = Simulator(g)
    r = sim.evaluate([0, 1, 1, 0], "sequential")
    assert not r.feasible and "cannot run" in r.violation
    r = sim.evaluate([0, 0, 1, 0], "throughput")
    assert not r.feasible and "co-location" in r.violation
    assert sim.evaluate([0, 0, 0, 1], "parallel").feasible
    r = sim.evaluate([0, 1, 0, 0], "parallel")  # node b on B, which cannot run it
    assert not r.feasible and r.value == float("inf")


def test_backend_by_name_and_bad_placements():
    be = SimulatorBackend(diamond(), "sequential")
    m = be.measure({"a": "A", "b": "B", "c": "A", "d": "A"})
    assert m.ok and m.latency_s == pytest.approx(6.95)
    m = be.measure({"a": "A", "b": "B", "c": "A"})
    assert not m.ok and m.stage == "validate" and "'d'" in m.error
    m = be.measure({"a": "A", "b": "GPU", "c": "A", "d": "A"})
    assert not m.ok and "GPU" in m.error


def test_cost_graph_rejects_non_topological_order():
    with pytest.raises(InvalidCostGraph, match="topological"):
        CostGraph(names=["a", "b"], devices=["A"], compute_s=[[1], [1]],
                  tensor_src=[1], tensor_bytes=[1], edge_src=[1], edge_dst=[0], edge_tensor=[0])


def test_start_times_by_hand():
    sim = Simulator(diamond())
    # sequential, [A, B, A, A]: a [0,1]; boundary 0.1 + t0 to B 0.5 -> b at 1.6, runs 1;
    # boundary 0.1 -> c at 2.7 (c is on A, t0 is there already), runs 3; t1 back to A
    # (0.25, first consumer d) -> d at 5.95, ends at the sequential value 6.95
    st = sim.start_times([0, 1, 0, 0], "sequential")
    assert st == pytest.approx([0.0, 1.6, 2.7, 5.95])
    assert st[-1] + 1 == pytest.approx(sim.evaluate([0, 1, 0, 0], "sequential").value)
    # parallel: the list schedule of test_parallel_by_hand
    assert sim.start_times([0, 1, 0, 0], "parallel") == pytest.approx([0.0, 1.5, 1.0, 4.0])
    assert sim.start_times([0, 1, 0, 0], "throughput").tolist() == [0.0] * 4


def test_start_times_end_at_the_objective_on_random_graphs():
    from hsdag_core.synthetic import random_cost_graph

    g = random_cost_graph(60, devices=3, seed=4)
    sim = Simulator(g)
    rng = np.random.default_rng(0)
    for _ in range(5):
        p = rng.integers(0, 3, g.num_nodes)
        cost = g.compute_s[np.arange(g.num_nodes), p]
        seq = sim.start_times(p, "sequential")
        assert np.all(np.diff(seq) >= cost[:-1] - 1e-15)  # one node after another
        assert seq[-1] + cost[-1] == pytest.approx(sim.evaluate(p, "sequential").value)
        par = sim.start_times(p, "parallel")
        assert (par + cost).max() == pytest.approx(sim.evaluate(p, "parallel").value)
        for s, d in zip(g.edge_src, g.edge_dst):  # a node starts after its inputs finish
            assert par[d] >= par[s] + cost[s] - 1e-12
