"""The restricted master LP of the set partitioning relaxation
(:mod:`policies.solvers.partition_bound`): its columns, and the pool that keeps them.

Every column the column generation finds stays in the pool (the restricted master
heuristic, :mod:`policies.solvers.master_heuristic`, draws on all of them), but the LP
keeps only those that may enter its basis soon. Most of the first columns are intervals of
the topological order that no good partition uses, and the simplex pays for every column
at every solve: on inceptionv3's 36,000 columns the master took a quarter of the column
generation's time. So after a solve the LP drops the columns whose reduced cost exceeds
the current gap between the master's value and the Lagrange bound (:meth:`Master.prune`),
in batches of at least :data:`PRUNE_SHARE` of its columns. A dropped column that the
prices make attractive again is found again by the exact pricing, so the relaxation and
its bound are unchanged; only the LP gets smaller ("column management", as in Desaulniers,
Desrosiers and Solomon, *Column Generation*, 2005).
"""
from __future__ import annotations

from typing import Optional

import highspy
import numpy as np
import scipy.sparse as sp

from policies.solvers.highs_model import new_highs

__all__ = ["Master", "PRUNE_SHARE", "column_rows"]

PRUNE_SHARE = 0.2
"""The LP drops columns only when at least this share of them go at once: each deletion
makes HiGHS refactor its basis."""

_INF = highspy.kHighsInf


def column_rows(n: int, sets) -> tuple[np.ndarray, np.ndarray]:
    """HiGHS's column-wise rows of the sets ``(class, nodes)`` over ``n`` cover rows and one
    row per class: each column's start and the row indices (its nodes, then ``n + class``)."""
    idx = [np.append(nodes, n + k).astype(np.int32) for k, nodes in sets]
    starts = np.cumsum([0] + [i.size for i in idx[:-1]]).astype(np.int32)
    return starts, np.concatenate(idx)


class Master:
    """The restricted master LP over ``n`` cover rows (``>= 1``) and one row per device
    class (at most ``counts[k]`` sets), its columns added in batches."""

    def __init__(self, n: int, counts: list[int], threads: Optional[int] = None) -> None:
        self.n, self.h = n, new_highs(threads)
        self.h.setOptionValue("solver", "simplex")
        lower = np.r_[np.ones(n), np.full(len(counts), -_INF)]
        upper = np.r_[np.full(n, _INF), np.asarray(counts, dtype=float)]
        self.h.addRows(lower.size, lower, upper, 0, np.zeros(lower.size, np.int32),
                       np.zeros(0, np.int32), np.zeros(0))
        self.sets: list[tuple[int, np.ndarray]] = []
        self.cost: list[float] = []
        self.live = np.zeros(0, dtype=np.int64)      # the pool's index of each LP column
        self.duals = (np.zeros(n), np.zeros(len(counts)))

    @property
    def columns(self) -> int:
        """Columns in the pool."""
        return len(self.sets)

    def add(self, cols: list[tuple[int, np.ndarray, float]]) -> None:
        """Columns ``(class, nodes, cost)``, to the pool and the LP."""
        if not cols:
            return
        starts, flat = column_rows(self.n, [(k, nodes) for k, nodes, _ in cols])
        self.h.addCols(len(cols), np.array([c for *_, c in cols]), np.zeros(len(cols)),
                       np.full(len(cols), _INF), flat.size, starts, flat, np.ones(flat.size))
        self.live = np.r_[self.live, len(self.sets) + np.arange(len(cols))]
        self.sets += [(k, nodes) for k, nodes, _ in cols]
        self.cost += [c for *_, c in cols]

    def solve(self) -> tuple[float, np.ndarray, np.ndarray]:
        """Value, the cover rows' duals (clipped at 0) and the class rows' (at most 0)."""
        self.h.run()
        dual = np.asarray(self.h.getSolution().row_dual)
        self.duals = (np.maximum(dual[:self.n], 0.0), np.minimum(dual[self.n:], 0.0))
        return (self.h.getInfo().objective_function_value, *self.duals)

    def prune(self, above: float) -> int:
        """Drops from the LP the columns whose reduced cost at the last solve exceeds
        ``above`` (none of its basis), if at least :data:`PRUNE_SHARE` of them; how many."""
        drop = np.flatnonzero(np.asarray(self.h.getSolution().col_dual) > above)
        if drop.size < PRUNE_SHARE * self.live.size:
            return 0
        self.h.deleteCols(drop.size, drop.astype(np.int32))
        self.live = np.delete(self.live, drop)
        return int(drop.size)

    def reduced(self) -> np.ndarray:
        """Each pool column's reduced cost at the last solve's duals."""
        pi, mu = self.duals
        k = np.array([c for c, _ in self.sets], dtype=np.int64)
        sizes = np.array([s.size for _, s in self.sets])
        a = sp.csr_matrix((np.ones(sizes.sum()), np.concatenate([s for _, s in self.sets]),
                           np.r_[0, np.cumsum(sizes)]), shape=(len(self.sets), self.n))
        return np.asarray(self.cost) - a @ pi - mu[k]
