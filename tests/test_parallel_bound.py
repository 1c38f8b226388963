"""The parallel objective's head-and-tail bound: predecessors send or queue on one device."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from envs.simulator import Simulator
from hsdag_core.costgraph import CostGraph
from policies.solvers.bounds import critical_path_s, lower_bound, parallel_levels
from tests.test_exact import random_dag


def _star(into: bool) -> CostGraph:
    """Three nodes feeding one (``into``) or one feeding three, 1 s each, on two devices,
    every tensor 10 s to send."""
    src, dst = ([0, 1, 2], [3, 3, 3]) if into else ([0, 0, 0], [1, 2, 3])
    producers = sorted(set(src))
    return CostGraph(names=[f"n{i}" for i in range(4)], devices=["D0", "D1"],
                     compute_s=np.ones((4, 2)), tensor_src=producers,
                     tensor_bytes=np.ones(len(producers)), edge_src=src, edge_dst=dst,
                     edge_tensor=[producers.index(u) for u in src],
                     tensor_transfer_s=np.full(len(producers), 10.0), name="star")


@pytest.mark.parametrize("into", [True, False])
def test_a_costly_fan_in_or_fan_out_queues_on_one_device(into):
    # sending costs 10 s, so the best schedule runs all four nodes on one device in 4 s;
    # the critical path (2 s) and the work per device (2 s) are far below it
    g = _star(into)
    sim = Simulator(g)
    best = min(sim.evaluate(np.array(p), "parallel").value
               for p in itertools.product(range(2), repeat=4))
    assert best == pytest.approx(4.0)
    assert lower_bound(g, "parallel") == pytest.approx(best)
    assert max(critical_path_s(g), 4 / 2) == pytest.approx(2.0)


@pytest.mark.parametrize("seed", range(6))
def test_every_schedule_starts_each_node_after_its_head_and_runs_its_tail(seed):
    g = random_dag(seed, n=9, D=3, uniform=bool(seed % 2), fanout=seed % 3 == 0)
    sim = Simulator(g)
    head, tail = parallel_levels(g)
    rng = np.random.default_rng(seed)
    for _ in range(50):
        p = rng.integers(0, g.num_devices, g.num_nodes)
        start = sim.start_times(p, "parallel")
        end = sim.evaluate(p, "parallel").value
        assert (start >= head - 1e-9).all()
        assert (end - start >= tail - 1e-9).all()
