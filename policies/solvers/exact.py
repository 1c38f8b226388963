"""Registry of the exact and algorithmic placement methods, called uniformly.

``solve(graph, objective, method, time_limit=...)`` runs one method and returns
a :class:`~policies.solvers.result.SolveResult` (placement, simulator value, bound,
gap, optimality). ``SOLVERS`` maps each method name to a :class:`Solver`
saying which objectives it accepts and for which it is exact.

========================  ===========================  ===================================
method                    objectives                   what it is
========================  ===========================  ===================================
``mincut``                sequential (2 devices)       exact s-t minimum cut
``alpha-expansion``       sequential                   heuristic: min-cut expansion moves
``segments``              sequential                   heuristic: topological order cut into
                                                       one-device segments (DP) + moves
``exact``                 the objectives of            the project's best exact solver for
                          ``EXACT_SOLVERS``            the objective (``EXACT_SOLVERS``)
``milp``                  sequential, throughput,      exact MILP (HiGHS, time limit);
                          parallel, latency            parallel: bound + placement only;
                                                       latency: Tarnawski et al.'s IP
``latency-greedy``        latency                      Tarnawski et al.'s greedy
``latency-search``        latency                      heuristic: segments DP + block moves
``milp-contig``           throughput                   exact MILP over contiguous splits
``dp``                    throughput                   DP over ideals (contiguous splits)
``cpsat``                 parallel                     OR-Tools CP-SAT schedule model
                                                       (time limit; value, bound, proof)
``heft``                  parallel                     HEFT list scheduling
``critical-path``         all                          DOPPLER's critical-path placement,
                                                       best of 50 episodes (``version=``
                                                       ``intended`` or ``coded``)
``m-topo``                all                          Baechi m-TOPO: topological fill
                                                       of the devices within memory
``m-etf``                 all                          Baechi m-ETF: earliest-start list
                                                       scheduling within memory
``m-sct``                 all                          Baechi m-SCT: m-ETF keeping each
                                                       favourite child with its parent
``single``                all                          best single device (``device=``)
``random-best``           all                          best of seeded random placements
                                                       on the profile (``train --method
                                                       random`` is random search, measured)
========================  ===========================  ===================================

"Exact" means the returned placement is optimal for the simulator's
objective over ``scope`` when the method finishes within its time limit
(``result.optimal`` says whether it did). The DP optimises the paper's load
model, which can under-count a sender's transfers (:mod:`policies.solvers.ideals`):
it states ``optimal`` only when the simulator agrees with its bound.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from envs.simulator import OBJECTIVES
from hsdag_core.costgraph import CostGraph
from policies.solvers.simple import solve_random, solve_single
from policies.solvers.baechi import solve_m_etf, solve_m_sct, solve_m_topo
from policies.solvers.critical_path import solve_critical_path
from policies.solvers.cpsat import solve_cpsat_parallel
from policies.solvers.heft import solve_heft
from policies.solvers.ideals import solve_dp
from policies.solvers.latency import solve_latency_greedy, solve_latency_search
from policies.solvers.latency_ip import solve_latency_ip
from policies.solvers.mincut import solve_alpha_expansion, solve_mincut
from policies.solvers.milp import solve_milp_parallel, solve_milp_throughput
from policies.solvers.milp_sequential import solve_milp_sequential
from policies.solvers.result import SolveResult
from policies.solvers.segments import solve_segments

__all__ = ["Solver", "SOLVERS", "EXACT_SOLVERS", "SolveResult", "solve", "methods_for",
           "exact_method", "best_exact_method", "heuristic_method"]



@dataclass(frozen=True)
class Solver:
    """A method of the registry.

    Attributes:
        name: registry key.
        fn: ``fn(graph, objective, *, time_limit, **options) -> SolveResult``.
        objectives: objectives it accepts.
        exact: objectives for which a finished run is a proven optimum.
        scope: ``"all"`` or ``"contiguous"`` (the splits it searches).
        summary: one line for listings.
    """

    name: str
    fn: Callable[..., SolveResult]
    objectives: tuple[str, ...]
    exact: tuple[str, ...]
    scope: str
    summary: str


def _milp(graph: CostGraph, objective: str, *, time_limit: Optional[float] = 60.0,
          **kw: Any) -> SolveResult:
    if objective == "sequential":
        return solve_milp_sequential(graph, objective, time_limit=time_limit, **kw)
    if objective == "throughput":
        return solve_milp_throughput(graph, objective, time_limit=time_limit, **kw)
    if objective == "latency":
        return solve_latency_ip(graph, objective, time_limit=time_limit, **kw)
    return solve_milp_parallel(graph, objective, time_limit=time_limit, **kw)


def _milp_contig(graph: CostGraph, objective: str, *, time_limit: Optional[float] = 60.0,
                 **kw: Any) -> SolveResult:
    return solve_milp_throughput(graph, objective, contiguous=True, time_limit=time_limit, **kw)


def _sequential_exact(graph: CostGraph) -> str:
    """The minimum cut on two devices without memory limits, else the MILP."""
    limited = bool(np.isfinite(graph.mem_capacity).any())
    return "mincut" if graph.num_devices == 2 and not limited else "milp"


#: the project's best exact solver of each objective: a name of :data:`SOLVERS`, or a
#: function of the graph returning one; ``solve --method exact`` runs it
EXACT_SOLVERS: dict[str, str | Callable[[CostGraph], str]] = {
    "sequential": _sequential_exact,
    "throughput": "milp",
    "latency": "milp",
    "parallel": "cpsat",
}


def best_exact_method(graph: CostGraph, objective: str) -> Optional[str]:
    """The solver ``solve --method exact`` runs for ``objective`` (:data:`EXACT_SOLVERS`)."""
    chosen = EXACT_SOLVERS.get(objective)
    return chosen if chosen is None or isinstance(chosen, str) else chosen(graph)


def _exact(graph: CostGraph, objective: str, *, time_limit: Optional[float] = 60.0,
           **kw: Any) -> SolveResult:
    method = best_exact_method(graph, objective)
    if method is None:
        raise ValueError(f"no exact solver is registered for the {objective} objective")
    return SOLVERS[method].fn(graph, objective, time_limit=time_limit, **kw)


def _critical_path_coded(graph: CostGraph, objective: str, **kw: Any) -> SolveResult:
    return solve_critical_path(graph, objective, **{"version": "coded", **kw})


SOLVERS: dict[str, Solver] = {s.name: s for s in (
    Solver("exact", _exact, tuple(EXACT_SOLVERS), ("sequential", "throughput", "latency"), "all",
           "the best exact solver of the objective (EXACT_SOLVERS; for parallel CP-SAT, whose "
           "schedule the simulator may not follow)"),
    Solver("mincut", solve_mincut, ("sequential",), ("sequential",), "all",
           "exact sequential optimum on two devices (s-t minimum cut)"),
    Solver("alpha-expansion", solve_alpha_expansion, ("sequential",), (), "all",
           "sequential heuristic on any number of devices (min-cut expansion moves)"),
    Solver("milp", _milp, OBJECTIVES, ("sequential", "throughput", "latency"), "all",
           "exact MILP (HiGHS); for sequential from 10 s with a memory limit, also the path "
           "bound and the set partitioning bound (column generation beside HiGHS) with its "
           "restricted master heuristic's placements; for "
           "parallel a schedule MILP giving a bound, small graphs; for latency Tarnawski et "
           "al.'s IP"),
    Solver("segments", solve_segments, ("sequential",), (), "all",
           "sequential heuristic: the best split of a topological order into segments, one "
           "device each (DP), then single-node moves; bound: from 10 s with a memory limit, the "
           "path bound and the set partitioning bound in the time left, its restricted master "
           "heuristic's placement where better"),
    Solver("latency-greedy", solve_latency_greedy, ("latency",), (), "all",
           "Tarnawski et al.'s greedy: accelerators filled in topological order"),
    Solver("latency-search", solve_latency_search, ("latency",), (), "all",
           "latency heuristic: segments DP and block moves (the latency IP's start)"),
    Solver("milp-contig", _milp_contig, ("throughput",), ("throughput",), "contiguous",
           "exact throughput MILP over contiguous splits"),
    Solver("dp", solve_dp, ("throughput",), (), "contiguous",
           "throughput DP over ideals (Tarnawski et al.), contiguous splits"),
    Solver("cpsat", solve_cpsat_parallel, ("parallel",), (), "all",
           "exact parallel schedule model (OR-Tools CP-SAT) from the best heuristic's start, "
           "then moves and annealing under the simulator"),
    Solver("heft", solve_heft, ("parallel",), (), "all", "HEFT list scheduling"),
    Solver("critical-path", solve_critical_path, OBJECTIVES, (), "all",
           "DOPPLER's critical-path placement, best of 50 episodes (version=intended|coded)"),
    Solver("critical-path-coded", _critical_path_coded, OBJECTIVES, (), "all",
           "DOPPLER's critical path as its repository codes it (node-selection tie bug)"),
    Solver("m-topo", solve_m_topo, OBJECTIVES, (), "all",
           "Baechi m-TOPO: topological order filling the devices in turn within memory"),
    Solver("m-etf", solve_m_etf, OBJECTIVES, (), "all",
           "Baechi m-ETF: earliest-start list scheduling within memory"),
    Solver("m-sct", solve_m_sct, OBJECTIVES, (), "all",
           "Baechi m-SCT: m-ETF keeping favourite children with their parents (greedy)"),
    Solver("single", solve_single, OBJECTIVES, (), "all",
           "everything on one device (the best one unless device= is given)"),
    Solver("random-best", solve_random, OBJECTIVES, (), "all",
           "best of seeded random placements (samples=, seed=)"),
)}


def methods_for(objective: str) -> list[str]:
    """Names of the methods that accept ``objective``."""
    return [n for n, s in SOLVERS.items() if objective in s.objectives]


def solve(graph: CostGraph, objective: str, method: str, *,
          time_limit: Optional[float] = 60.0, **options: Any) -> SolveResult:
    """Run ``method`` on ``graph`` for ``objective``.

    Args:
        time_limit: seconds for the methods that honour one (MILPs, DP,
            alpha-expansion, random-best); None = no limit.
        options: method options (``device=`` for ``single``, ``samples=`` /
            ``seed=`` for ``random-best``, ``rel_gap=`` for the MILPs,
            ``max_ideals=`` for ``dp``).

    Raises:
        ValueError: unknown objective or method, or a method that does not
            accept this objective or graph (the message says what to use).
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    if method not in SOLVERS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(SOLVERS)}")
    spec = SOLVERS[method]
    if objective not in spec.objectives:
        raise ValueError(f"method {method!r} does not solve the {objective} objective; "
                         f"methods for it: {', '.join(methods_for(objective))}")
    return spec.fn(graph, objective, time_limit=time_limit, **options)


def exact_method(graph, objective: str) -> Optional[str]:
    """The exact solver that applies to ``objective`` on ``graph``, if any: what a run's
    ``optimum`` baseline, refit and the guide solve with (none for ``parallel``, whose
    runs compare with HEFT: its schedule model optimises over schedules, the simulator
    runs a placement first come first served)."""
    return None if objective == "parallel" else best_exact_method(graph, objective)


def heuristic_method(objective: str) -> Optional[str]:
    """The heuristic a run solves its profile with where no exact solver applies to
    ``objective`` (HEFT for ``parallel``), if any."""
    return "heft" if objective == "parallel" else None
