"""The sequential objective's set partitioning bound (column generation over the node sets
one device can hold): never above the optimum, and it proves what the path bound cannot."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hsdag_core.costgraph import CostGraph
from hsdag_core.dnnpart import load_dnnpart
from policies.solvers.milp_sequential import solve_milp_sequential
from policies.solvers.partition_bound import partition_bound
from policies.solvers.path_bound import sequential_bound
from policies.solvers.segments import solve_segments
from tests.test_sequential_bound import best_sequential, branchy, make_input


def _two_branches() -> CostGraph:
    """0 fans out to two branches 1-2 and 3-4 that join at 5; each branch fills one
    accelerator. Node 0 costs more than its tensor: the relaxation covers a node at least
    once, and a cheap fan-out run twice would save its tensor."""
    nodes = [{"id": i, "supportedOnFpga": 1, "cpuLatency": 100.0, "fpgaLatency": 6.0 if i == 0 else 1.0,
              "isBackwardNode": 0, "size": s} for i, s in enumerate([0.0, 4.0, 4.0, 4.0, 4.0, 0.0])]
    edges = [(0, 1, 5.0), (1, 2, 5.0), (2, 5, 3.0), (0, 3, 5.0), (3, 4, 5.0), (4, 5, 3.0)]
    return make_input(nodes, edges, mem=8.0, accs=2)


@pytest.mark.parametrize("colocate", [False, True])
def test_never_above_the_optimum_and_often_equal_to_it(colocate):
    tight = above_path = 0
    for seed in range(12):
        g = branchy(seed, 7, colocate)
        best = best_sequential(g)
        bound, info = partition_bound(g, 20.0)
        assert bound <= best * (1 + 1e-9), (seed, bound, best, info)
        tight += bound >= best * (1 - 1e-6)
        above_path += bound > sequential_bound(g) + 1e-9
    # the relaxation of set partitioning is close to these optima: most are met exactly
    assert tight >= 8, tight
    assert above_path >= 4, above_path


def test_two_branches_that_cannot_share_a_device_pay_their_tensor():
    # the fan-out's tensor (5) and one join tensor (3) cross. Every path fits one
    # accelerator, so the path bound sees at most the branch beside it
    g = _two_branches()
    best = best_sequential(g)
    assert best == pytest.approx(19e-3)         # 6 + 5 x 1 ms of compute, 5 + 3 ms of tensors
    bound, info = partition_bound(g, 20.0)
    assert bound == pytest.approx(best, rel=1e-6)
    assert sequential_bound(g) <= best - 5e-3   # it sends one branch, never the join


def test_transfers_that_depend_on_the_pair_are_charged_their_cheapest_sender():
    # links of different latencies: each set is charged, per tensor it receives, the
    # fastest link into its device, which every placement pays at least
    for seed in range(6):
        g = branchy(seed, 7)
        D = g.num_devices
        lat = np.random.default_rng(seed).uniform(0.5e-3, 4e-3, size=(D, D))
        np.fill_diagonal(lat, 0.0)
        pair = dataclasses.replace(g, tensor_transfer_s=None, link_latency_s=lat,
                                   link_bandwidth_Bps=np.full((D, D), np.inf))
        best = best_sequential(pair)
        bound, info = partition_bound(pair, 20.0)
        assert np.isfinite(bound)
        assert bound <= best * (1 + 1e-9), (seed, bound, best)


def test_a_long_solve_takes_it_as_its_bound():
    # the module above: a 10 s solve computes the set partitioning bound beside HiGHS and
    # ends at the optimum (HiGHS may prove it first on six nodes)
    g = _two_branches()
    r = solve_milp_sequential(g, time_limit=10.0)
    assert r.value == pytest.approx(19e-3)
    assert r.gap <= 1e-5
    assert r.info["partition_bound_s"] <= r.value * (1 + 1e-9)


def test_the_segments_heuristic_reports_it_given_the_time():
    # the same module: the segments' placement is the optimum, which the path bound alone
    # leaves at least 5 ms open and the set partitioning bound proves
    g = _two_branches()
    quick = solve_segments(g, time_limit=5.0)
    assert "partition_bound_s" not in quick.info and not quick.optimal
    r = solve_segments(g, time_limit=10.0)
    assert r.value == pytest.approx(19e-3)
    assert r.info["partition_bound_s"] == pytest.approx(r.value, rel=1e-5)
    assert r.optimal and r.solve_s < 10.0


@pytest.mark.slow
def test_it_proves_gnmt_where_the_branch_and_bound_alone_does_not(benchmarks_dir):
    # the dnn-partitioning latency input gnmt: HiGHS alone ends 60 s at a gap of about 1.4%;
    # the set partitioning bound meets the start and stops it
    g = load_dnnpart(benchmarks_dir / "latency-inputs/LayerGraphs/gnmt_inference.json")
    r = solve_milp_sequential(g, time_limit=60.0)
    assert r.gap <= 1e-5
    assert r.info["partition_bound_s"] >= r.value * (1 - 1e-5)
    assert r.info["partition_proves_incumbent"]


def test_its_programs_run_on_one_thread_whatever_the_callers_thread_holds():
    # HiGHS sizes one task scheduler per calling thread at its first run and fails a later
    # run there that asks for another size: the bound's one-thread programs run in a
    # thread of their own, so a caller whose thread has run HiGHS on two threads still
    # gets the bound. The caller here is a fresh thread, so that the test's own thread
    # keeps whatever scheduler it has
    import threading

    import highspy

    def tiny(threads: int) -> highspy.HighsStatus:
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("threads", threads)
        h.addVar(0.0, 1.0)
        return h.run()

    out = {}

    def caller() -> None:
        out["two"] = tiny(2)
        out["one"] = tiny(1)                   # the trap itself, in this thread
        out["bound"] = partition_bound(_two_branches(), 20.0)[0]

    t = threading.Thread(target=caller)
    t.start()
    t.join()
    assert out["two"] == highspy.HighsStatus.kOk and out["one"] == highspy.HighsStatus.kError
    assert out["bound"] == pytest.approx(19e-3, rel=1e-6)
