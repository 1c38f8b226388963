"""The exact and algorithmic solvers as ``train --method`` rows (``exact``, ``heft``,
Baechi's ``m-topo``, ``m-etf``, ``m-sct``).

Each computes one placement from the run's profile (a cost graph of the run's graph
and devices) and the run measures it like any other placement, so a sweep lists the
solvers beside the learned methods and the searches, on the same backend. The profile
is what the solver knows: where it is off the machine (a real backend, ``--sim-profile``),
the measured latency says how far that matters.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from hsdag_core.costgraph import CostGraph

__all__ = ["exact_placement", "heft_placement", "m_topo_placement", "m_etf_placement",
           "m_sct_placement"]


def exact_placement(costs: CostGraph, objective: str,
                    time_limit: Optional[float] = 120.0) -> Optional[np.ndarray]:
    """The placement of ``solve --method exact`` for ``objective`` on ``costs``: the
    objective's exact solver (:data:`policies.solvers.exact.EXACT_SOLVERS`: s-t minimum cut
    for two devices without memory limits, else the MILP; the latency IP; CP-SAT for
    ``parallel``) within ``time_limit``, or None where none is feasible."""
    from policies.solvers.exact import solve

    res = solve(costs, objective, "exact", time_limit=time_limit)
    return np.asarray(res.placement, dtype=np.int64) if res.feasible else None


def heft_placement(costs: CostGraph, objective: str,
                   time_limit: Optional[float] = 120.0) -> Optional[np.ndarray]:
    """HEFT's list schedule of ``costs`` (Topcuoglu et al., 2002): its placement, measured
    under the run's objective whichever it is (HEFT itself schedules for the parallel one)."""
    from policies.solvers.heft import solve_heft

    res = solve_heft(costs, "parallel", time_limit=time_limit)
    return np.asarray(res.placement, dtype=np.int64) if res.feasible else None


def _baechi(method: str, costs: CostGraph, objective: str) -> Optional[np.ndarray]:
    from policies.solvers.exact import solve

    res = solve(costs, objective, method)
    return np.asarray(res.placement, dtype=np.int64) if res.feasible else None


def m_topo_placement(costs: CostGraph, objective: str,
                     time_limit: Optional[float] = 120.0) -> Optional[np.ndarray]:
    """Baechi's m-TOPO placement of ``costs`` (:mod:`policies.solvers.baechi`), None when
    no device holds some node."""
    return _baechi("m-topo", costs, objective)


def m_etf_placement(costs: CostGraph, objective: str,
                    time_limit: Optional[float] = 120.0) -> Optional[np.ndarray]:
    """Baechi's m-ETF placement of ``costs`` (:mod:`policies.solvers.baechi`)."""
    return _baechi("m-etf", costs, objective)


def m_sct_placement(costs: CostGraph, objective: str,
                    time_limit: Optional[float] = 120.0) -> Optional[np.ndarray]:
    """Baechi's m-SCT placement of ``costs`` (:mod:`policies.solvers.baechi`, greedy
    favourite children)."""
    return _baechi("m-sct", costs, objective)
