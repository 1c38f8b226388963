"""The restricted master heuristic: a set partitioning IP over the column generation's sets
turns the relaxation into placements."""
from __future__ import annotations

import numpy as np
import pytest

from envs.simulator import Simulator
from policies.solvers.master_heuristic import restricted_master_ip
from policies.solvers.partition_bound import partition_bound
from tests.test_sequential_bound import best_sequential, branchy


def _pool():
    """Four nodes, one class of two devices. Columns: the incumbent {0,1} + {2,3} (20),
    the better {0,2} + {1,3} (10), a cheaper cover that overlaps ({0,1,2} + {2,3}: 12) and
    a cheaper partition that needs three devices ({0}, {2}, {1,3}: 6)."""
    sets = [(0, np.array(s)) for s in ([0, 1], [2, 3], [0, 2], [1, 3], [0, 1, 2], [0], [2])]
    cost = np.array([10.0, 10.0, 5.0, 5.0, 2.0, 0.5, 0.5])
    return sets, cost


def test_it_picks_the_cheapest_partition_the_device_counts_allow():
    sets, cost = _pool()
    out = restricted_master_ip(4, [2], sets, cost, np.zeros(len(sets)), [0, 1], np.inf)
    assert out is not None
    chosen, value = out
    assert sorted(chosen.tolist()) == [2, 3] and value == pytest.approx(10.0)
    # with a third device the split into {0}, {2}, {1,3} is cheaper still
    chosen, value = restricted_master_ip(4, [3], sets, cost, np.zeros(len(sets)), [0, 1], np.inf)
    assert sorted(chosen.tolist()) == [3, 5, 6] and value == pytest.approx(6.0)


def test_it_returns_nothing_where_the_incumbent_is_best():
    sets, cost = _pool()
    assert restricted_master_ip(4, [2], sets, cost, np.zeros(len(sets)), [2, 3], np.inf) is None


def test_the_smallest_pool_first_then_larger_ones():
    # the better partition has the largest reduced costs: the first pool (500 columns of
    # least reduced cost) misses it, a doubled one holds it
    sets, cost = _pool()
    filler = [(0, np.array([0, 1, 2, 3]))] * 600          # a cover by one set, too dear
    reduced = np.r_[np.zeros(2), np.full(2, 9.0), np.zeros(3), np.full(600, 1.0)]
    out = restricted_master_ip(4, [2], sets + filler, np.r_[cost, np.full(600, 50.0)],
                               reduced, [0, 1], np.inf)
    assert out is not None and sorted(out[0].tolist()) == [2, 3]


@pytest.mark.parametrize("colocate", [False, True])
def test_the_column_generation_finds_the_optimum_from_a_poor_start(colocate):
    # every node on the slow CPU: the heuristic, run once the column generation converges,
    # replaces it by the optimum on most random DAGs (also some where the relaxation is
    # below the optimum), never below it
    reached = 0
    for seed in range(10):
        g = branchy(seed, 7, colocate)
        sim = Simulator(g)
        start = np.zeros(g.num_nodes, dtype=np.int64)
        first = sim.evaluate(start, "sequential").value
        found = []
        bound, info = partition_bound(g, 20.0, start, stop_at=first,
                                      better=lambda p, v: found.append((p, v)))
        values = [v for _, v in found]
        assert values == sorted(values, reverse=True) and all(v < first for v in values)
        for p, v in found:
            r = sim.evaluate(p, "sequential")
            assert r.feasible and r.value == pytest.approx(v)
        best = best_sequential(g)
        assert all(v >= best * (1 - 1e-9) for v in values)
        reached += min([first] + values) <= best * (1 + 1e-9)
        # it runs unless the bound proves the start (co-location may keep every node on the CPU)
        assert info["master_heuristic_runs"] >= 1 or bound >= first * (1 - 1e-5)
    assert reached >= 8, reached
