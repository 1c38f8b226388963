"""A mixed-integer program assembled column by column and solved by HiGHS (``highspy``).

The MILPs of :mod:`policies.solvers.milp` build their variables and rows here and
solve through HiGHS's own Python interface rather than ``scipy.optimize.milp``
(the same solver), because it takes a *MIP start*: a placement found by a
heuristic is handed to the branch and bound as its first incumbent, so a solve
stopped at its time limit returns a placement at least as good as the start,
and the start's value prunes the search from the first node.
"""
from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from typing import Callable, Optional

import highspy
import numpy as np
import scipy.sparse as sp

__all__ = ["Model", "MipResult", "new_highs"]

_banner_shown = False


def _scale(magnitude: float) -> float:
    """The factor that brings an objective of about ``magnitude`` to about 1000 for HiGHS
    (1 when the magnitude is unknown)."""
    return 1e3 / magnitude if np.isfinite(magnitude) and magnitude > 0 else 1.0


def _cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def new_highs(threads: Optional[int] = None) -> highspy.Highs:
    """A silent HiGHS instance (``threads``: its option, None for HiGHS's default). HiGHS
    prints its copyright banner to the process's standard output when the first instance
    is made, before any option can turn output off; that one construction runs with file
    descriptor 1 sent to the null device, so a command's ``--json`` output stays JSON.

    HiGHS keeps one task scheduler per calling thread, sized by the first run in that
    thread; a later run there that asks for another number of threads fails. A caller
    that sets ``threads`` runs its instances in a thread of its own."""
    global _banner_shown
    if _banner_shown:
        h = highspy.Highs()
    else:
        sys.stdout.flush()
        saved = os.dup(1)
        try:
            with open(os.devnull, "w") as null:
                os.dup2(null.fileno(), 1)
                h = highspy.Highs()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        _banner_shown = True
    h.setOptionValue("output_flag", False)
    if threads is not None:
        h.setOptionValue("threads", int(threads))
    return h


@dataclass
class MipResult:
    """What a solve gives, in the model's own units.

    Attributes:
        status: 0 optimal, 1 stopped at a limit, 2 infeasible, 3 other (HiGHS's
            model status in ``message``).
        x: the best solution's column values, None when HiGHS found none.
        fun: its objective value (None without a solution).
        mip_dual_bound: the proven lower bound on the optimum (``-inf`` without one).
        mip_node_count: branch-and-bound nodes explored.
        message: HiGHS's model status in words.
        start_accepted: the MIP start was feasible for the model (None: no start).
    """

    status: int
    x: Optional[np.ndarray]
    fun: Optional[float]
    mip_dual_bound: float
    mip_node_count: int
    message: str
    start_accepted: Optional[bool] = None


class Model:
    """A MILP assembled column by column, rows in COO form."""

    def __init__(self) -> None:
        self.cost: list[np.ndarray] = []
        self.lb: list[np.ndarray] = []
        self.ub: list[np.ndarray] = []
        self.integer: list[np.ndarray] = []
        self.nvar = 0
        self.r: list[np.ndarray] = []
        self.c: list[np.ndarray] = []
        self.v: list[np.ndarray] = []
        self.row_lb: list[np.ndarray] = []
        self.row_ub: list[np.ndarray] = []
        self.nrow = 0

    def var(self, shape, lb=0.0, ub=np.inf, integer: bool = False, cost=0.0) -> np.ndarray:
        """``shape`` new columns; returns their indices in that shape."""
        k = int(np.prod(shape))
        idx = np.arange(self.nvar, self.nvar + k).reshape(shape)
        self.nvar += k
        self.cost.append(np.broadcast_to(np.asarray(cost, dtype=np.float64), shape).ravel().copy())
        self.lb.append(np.broadcast_to(np.asarray(lb, dtype=np.float64), shape).ravel())
        self.ub.append(np.broadcast_to(np.asarray(ub, dtype=np.float64), shape).ravel())
        self.integer.append(np.full(k, int(integer)))
        return idx

    def rows(self, cols, coefs, lb=-np.inf, ub=np.inf) -> None:
        """Add ``R`` rows ``lb <= sum_j coefs[r, j] * var[cols[r, j]] <= ub``."""
        cols = np.atleast_2d(np.asarray(cols, dtype=np.int64))
        R, k = cols.shape
        if R == 0 or k == 0:
            return
        coefs = np.broadcast_to(np.asarray(coefs, dtype=np.float64), (R, k))
        self.r.append(np.repeat(np.arange(self.nrow, self.nrow + R), k))
        self.c.append(cols.ravel())
        self.v.append(coefs.ravel())
        self.row_lb.append(np.broadcast_to(np.asarray(lb, dtype=np.float64), (R,)).copy())
        self.row_ub.append(np.broadcast_to(np.asarray(ub, dtype=np.float64), (R,)).copy())
        self.nrow += R

    def highs(self, scale: float = 1.0, threads: Optional[int] = None) -> highspy.Highs:
        """The model as a silent HiGHS instance (:func:`new_highs`), its objective times
        ``scale``, for a caller that re-solves it with changed costs."""
        cat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0))
        A = sp.csc_array((cat(self.v), (cat(self.r).astype(np.int64), cat(self.c).astype(np.int64))),
                         shape=(self.nrow, self.nvar))
        A.sum_duplicates()
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = self.nvar, self.nrow
        lp.col_cost_ = scale * cat(self.cost)
        lp.col_lower_, lp.col_upper_ = cat(self.lb), cat(self.ub)
        lp.row_lower_, lp.row_upper_ = cat(self.row_lb), cat(self.row_ub)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = A.indptr.astype(np.int32)
        lp.a_matrix_.index_ = A.indices.astype(np.int32)
        lp.a_matrix_.value_ = A.data
        lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = self.nvar, self.nrow
        lp.integrality_ = [highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous
                           for i in cat(self.integer)]
        h = new_highs(threads)
        h.passModel(lp)
        return h

    def solve(self, time_limit: Optional[float], rel_gap: float, magnitude: float,
              start: Optional[tuple[np.ndarray, np.ndarray]] = None, threads: Optional[int] = None,
              beside: Optional[Callable[[Callable[[], None], Callable[[], bool]], None]] = None
              ) -> MipResult:
        """Solve; ``start`` (``(columns, values)``, the integer columns at
        least: HiGHS completes the others by an LP) is the MIP start. The objective is
        scaled to about 1000 for the solver (HiGHS stops at an *absolute* gap of 1e-6,
        coarse for values of a few ms in seconds) and unscaled in the result.

        ``beside(cancel, done)`` runs in this thread while HiGHS solves in another (HiGHS
        releases the interpreter's lock): ``cancel()`` stops the branch and bound, as when a
        bound computed beside it proves its incumbent; ``done()`` says that it has ended.
        Beside it, HiGHS runs on as many threads as the process has cores unless
        ``threads`` says otherwise: left to its default there, its branch and bound ran
        single-threaded and proved a held-out input in 21 s that it proves in 1 s on two
        (docs/results/solvers.md)."""
        scale = _scale(magnitude)
        if beside is not None and threads is None:
            threads = _cores()
        h = self.highs(scale)
        h.setOptionValue("mip_rel_gap", float(rel_gap))
        if time_limit is not None:
            h.setOptionValue("time_limit", max(float(time_limit), 1e-3))
        if threads is not None:
            h.setOptionValue("threads", int(threads))
        accepted = None
        if start is not None:
            cols, vals = start
            accepted = h.setSolution(len(cols), np.asarray(cols, dtype=np.int32),
                                     np.asarray(vals, dtype=np.float64)) == highspy.HighsStatus.kOk
        if beside is None:
            h.run()
        else:
            stop = threading.Event()

            def interrupt(event) -> None:   # between the branch and bound's nodes only: a
                if stop.is_set():           # callback per simplex iteration would take
                    event.interrupt()       # the interpreter's lock from `beside`

            h.cbMipInterrupt += interrupt
            worker = threading.Thread(target=h.run, daemon=True)
            worker.start()
            try:
                beside(stop.set, lambda: not worker.is_alive())
            finally:
                worker.join()
        ms = h.getModelStatus()
        info = h.getInfo()
        status = {highspy.HighsModelStatus.kOptimal: 0, highspy.HighsModelStatus.kInfeasible: 2,
                  highspy.HighsModelStatus.kTimeLimit: 1,
                  highspy.HighsModelStatus.kIterationLimit: 1,
                  highspy.HighsModelStatus.kSolutionLimit: 1,
                  highspy.HighsModelStatus.kInterrupt: 1}.get(ms, 3)
        has_sol = info.primal_solution_status == highspy.SolutionStatus.kSolutionStatusFeasible \
            if hasattr(highspy, "SolutionStatus") else info.primal_solution_status == 2
        x = np.asarray(h.getSolution().col_value) if has_sol else None
        bound = float(info.mip_dual_bound)
        return MipResult(status=status, x=x,
                         fun=float(info.objective_function_value) / scale if has_sol else None,
                         mip_dual_bound=bound / scale if np.isfinite(bound) else -np.inf,
                         mip_node_count=int(info.mip_node_count),
                         message=h.modelStatusToString(ms), start_accepted=accepted)

    def relaxation(self, time_limit: Optional[float], magnitude: float) -> Optional[np.ndarray]:
        """The column values of the LP relaxation's optimum (integrality dropped), or None
        when HiGHS finds none within ``time_limit`` seconds."""
        h = self.highs(_scale(magnitude))
        h.setOptionValue("solve_relaxation", True)
        if time_limit is not None:
            h.setOptionValue("time_limit", max(float(time_limit), 1e-3))
        h.run()
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return None
        return np.asarray(h.getSolution().col_value)
