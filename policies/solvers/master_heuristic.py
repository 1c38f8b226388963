"""A primal heuristic from the set partitioning relaxation's columns: the restricted
master heuristic (:func:`restricted_master_ip`).

The column generation of :mod:`policies.solvers.partition_bound` leaves thousands of node
sets, each with its cost and its reduced cost at the master's duals. An optimal placement
is a partition of the nodes into such sets, and the sets of small reduced cost are those
the relaxation's optimum is built of, so an integer program over them is the usual way to
turn the relaxation into placements ("price and branch"; Joncour, Michel, Sadykov, Sverdlov
and Vanderbeck, *Column generation based primal heuristics*, 2010). It chooses, from the
``k`` sets of least reduced cost and the incumbent's own sets, a partition of the nodes
(each node in exactly one set, at most ``n_k`` sets of device class ``k``) of least total
cost; HiGHS solves it, the incumbent's sets its MIP start, so it never returns worse.

How large a pool to give it cannot be known beforehand: a small one solves in a fraction
of a second but may hold no better partition than the incumbent; a large one holds more
but HiGHS may not finish it. So ``k`` starts at :data:`POOL_FIRST` and doubles while the
previous program was solved to optimality and the next is expected to end before the
deadline (:data:`GROWTH` times the last one's seconds), until the pool holds every column;
the best partition of any step is kept, and the next step starts from it.
"""
from __future__ import annotations

import time
from typing import Optional, Sequence

import highspy
import numpy as np

from policies.solvers.highs_model import new_highs
from policies.solvers.partition_master import column_rows

__all__ = ["restricted_master_ip", "GROWTH", "POOL_FIRST"]

POOL_FIRST = 500
"""The columns of least reduced cost in the first program; each next one doubles them."""

GROWTH = 8.0
"""How many times longer a program of twice the columns is expected to take: 3-9 times
on inceptionv3's columns (0.05 s, 0.17 s, 0.36 s, 3.1 s and 20 s from 500 to 8,000)."""


def _program(n: int, counts: Sequence[int], sets: Sequence[tuple[int, np.ndarray]],
             cost: np.ndarray, pick: np.ndarray, start: np.ndarray, threads: Optional[int]
             ) -> highspy.Highs:
    """The set partitioning IP over the columns ``pick`` (``start``: those at 1 in the
    MIP start)."""
    h = new_highs(threads)
    K = len(counts)
    lower = np.r_[np.ones(n), np.zeros(K)]
    upper = np.r_[np.ones(n), np.asarray(counts, dtype=float)]
    h.addRows(n + K, lower, upper, 0, np.zeros(n + K, np.int32), np.zeros(0, np.int32),
              np.zeros(0))
    starts, flat = column_rows(n, [sets[j] for j in pick])
    h.addCols(pick.size, cost[pick], np.zeros(pick.size), np.ones(pick.size), flat.size,
              starts, flat, np.ones(flat.size))
    h.changeColsIntegrality(pick.size, np.arange(pick.size, dtype=np.int32),
                            np.ones(pick.size, dtype=np.uint8))
    if start.size:
        h.setSolution(start.size, np.searchsorted(pick, start).astype(np.int32),
                      np.ones(start.size))
    return h


def restricted_master_ip(n: int, counts: Sequence[int], sets: Sequence[tuple[int, np.ndarray]],
                         cost: np.ndarray, reduced: np.ndarray, incumbent: Sequence[int],
                         deadline: float, threads: Optional[int] = None
                         ) -> Optional[tuple[np.ndarray, float]]:
    """The best partition of the ``n`` nodes into the columns ``sets`` (``(class, nodes)``,
    costs ``cost``, reduced costs ``reduced``) found before ``deadline`` (a
    :func:`time.perf_counter` time), as ``(column indices, cost)``; None where none is
    cheaper than the columns ``incumbent`` (a partition, or empty where there is none).
    ``threads``: HiGHS's (:func:`policies.solvers.highs_model.new_highs`)."""
    cost = np.asarray(cost, dtype=float)
    start = np.unique(np.asarray(incumbent, dtype=np.int64))
    best = float(cost[start].sum()) if start.size else np.inf
    found = None
    order = np.argsort(reduced, kind="stable")
    k = POOL_FIRST
    while True:
        t = time.perf_counter()
        pick = np.union1d(order[:k], start)
        h = _program(n, counts, sets, cost, pick, start, threads)
        h.setOptionValue("time_limit", max(deadline - time.perf_counter(), 0.01))
        h.setOptionValue("mip_rel_gap", 1e-6)
        h.run()
        info = h.getInfo()
        if info.primal_solution_status == 2 and info.objective_function_value < best * (1 - 1e-9):
            best = float(info.objective_function_value)
            found = pick[np.asarray(h.getSolution().col_value) > 0.5]
            start = found
        now = time.perf_counter()
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal or k >= len(sets) or \
                now + GROWTH * (now - t) > deadline:
            break
        k *= 2
    return None if found is None else (found, best)
