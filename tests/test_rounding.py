"""Rounding the sequential MILP's LP relaxation (policies/solvers/rounding.py)."""
from __future__ import annotations

import time

import numpy as np
import pytest

from envs.simulator import Simulator
from hsdag_core.costgraph import CostGraph
from policies.solvers.rounding import fill_rounding, round_relaxation


def two_accelerators(n: int = 30) -> CostGraph:
    """A chain of ``n`` nodes of one byte each: the CPU runs each in 1 s, two accelerators
    in 0.1 s and hold 60% and 40% of the bytes; a tensor costs 0.05 s between them and
    0.2 s to or from the CPU."""
    lat = np.array([[0.0, 0.2, 0.2], [0.2, 0.0, 0.05], [0.2, 0.05, 0.0]])
    return CostGraph(names=[f"n{i}" for i in range(n)], devices=["CPU", "A", "B"],
                     compute_s=np.tile([1.0, 0.1, 0.1], (n, 1)),
                     tensor_src=np.arange(n - 1), tensor_bytes=np.ones(n - 1),
                     edge_src=np.arange(n - 1), edge_dst=np.arange(1, n),
                     edge_tensor=np.arange(n - 1), link_latency_s=lat,
                     mem_bytes=np.ones(n), mem_capacity=np.array([np.inf, 0.6 * n, 0.4 * n]))


def test_fill_cuts_a_split_share_into_contiguous_memory_sized_segments():
    """The relaxation splits every node 60/40 between the accelerators at no transfer
    cost; argmax puts all on the larger one, over its memory, while filling gives each
    accelerator one contiguous run of its share of the bytes: one transfer, the optimum."""
    g = two_accelerators()
    share = np.tile([0.0, 0.6, 0.4], (g.num_nodes, 1))
    sim = Simulator(g)
    assert sim.check(share.argmax(axis=1)) is not None   # argmax: all on A, over its memory
    p = fill_rounding(g, share, first=1)
    assert p.tolist() == [1] * 18 + [2] * 12
    assert sim.check(p) is None
    assert sim.sequential(p).value == pytest.approx(30 * 0.1 + 0.05)
    assert fill_rounding(g, share, first=2).tolist() == [2] * 12 + [1] * 18
    integral = np.eye(3)[[1] * 10 + [0] * 20]                  # integral nodes keep their device
    assert fill_rounding(g, integral, first=2).tolist() == [1] * 10 + [0] * 20


def test_round_relaxation_takes_the_best_rounding_within_the_limits():
    g = two_accelerators()
    share = np.tile([0.0, 0.6, 0.4], (g.num_nodes, 1))
    placement, value = round_relaxation(g, share, time.perf_counter() + 5.0)
    assert Simulator(g).check(placement) is None
    assert value == pytest.approx(30 * 0.1 + 0.05)


def test_a_short_milp_on_split_accelerators_starts_at_the_optimum():
    """Through the MILP: the short solve's rounded start is its optimum, which the long
    solve proves."""
    from policies.solvers.milp_sequential import solve_milp_sequential

    g = two_accelerators()
    best = solve_milp_sequential(g, time_limit=30.0)
    assert best.optimal and best.value == pytest.approx(3.05)
    short = solve_milp_sequential(g, time_limit=1.0, start=np.zeros(g.num_nodes, dtype=np.int64))
    assert short.info["lp_rounded_s"] == pytest.approx(3.05)
    assert 0 < short.info["lp_s"] < 1.0     # what the relaxation took, for a caller's next share
    assert short.value == pytest.approx(3.05)
