"""A run's start, before its policy proposes anything: the baselines and the first placements.

Every run measures its baselines once (each single device, the exact solver's placement
on the run's profile, the backend's own baselines:
:func:`hsdag_ray.run.compute_baselines.compute_baselines`).
Some runs then measure placements of their own first, through the run's store and counted
in its budget, before the measuring actors hold the measuring slots: a fine-tuning run
(``--init``) the pre-trained policy's greedy placement and the run's start, an exact start
(``--exact-start``, on with ``--guide``) the exact solver's placement on the profile, and
``--etf-start`` Baechi's m-ETF placement. A resumed run measures none of them again.
"""
from __future__ import annotations

from typing import Any

from envs.baselines import Baselines
from hsdag_ray.run.compute_baselines import compute_baselines

__all__ = ["measure_start"]


def measure_start(run, env, store, state: dict[str, Any], say) -> Baselines:
    """The baselines of ``run`` (a :class:`hsdag_ray.run.resolved_run.ResolvedRun`; measured
    now, or read from ``state`` when resumed) after measuring the run's first placements
    where it has any; records in ``state`` the baselines and whether the m-ETF start was
    measured."""
    from envs.measuring_service import measuring_service, release

    cfg, exact = run.cfg, run.starts_exact

    known = "latency_s" in (state.get("baselines") or {})
    first = (bool(cfg.run.init) or exact or cfg.guide.etf_start) and cfg.run.budget > 0 \
        and store.stats()["placements"] == 0
    baselines = Baselines.from_json(state["baselines"]) if known else None
    if not known or first:
        service = measuring_service(run.env_config, run.real, run.resources, tracked=first)
        try:
            if not known:
                baselines = compute_baselines(service, env, cfg.env.objective, say,
                                              time_limit=cfg.run.solver_time_limit)
            if first and cfg.run.init:
                _measure_first(run, service, env, baselines.single_devices(), say)
            if first and exact:
                _measure_exact(baselines, service, say)
            if first and cfg.guide.etf_start:
                state["etf_start"] = _measure_etf(env, service, cfg.env.objective, say)
        finally:
            release(service)
    state["baselines"] = baselines.to_json()
    return baselines


def _measure_first(run, service, env, singles: dict[str, float], say) -> None:
    """Measure the pre-trained policy's greedy placement (made to fit the devices) through
    the run's store, the run's first placement, then the run's start (the fastest single
    device, repaired to fit: :func:`envs.incumbent.start_placement`), which a run from
    scratch that samples around its best measures first: a fine-tuning run is then never
    worse than the best single device, whatever the checkpoint's placement of this graph
    (HSDAG pre-trained on real-wide placed ResNet-50's early stages on the CPU, 1.64x the
    optimum, where the accelerator alone is 1.009x, and fine-tuning took 62-121
    measurements to find what scratch measures first)."""
    import numpy as np

    from envs.incumbent import start_placement
    from envs.measuring_service import call
    from hsdag_ray.run.pretrained import first_placement

    p = first_placement(run.ckpt, run.method, run.env_config, run.real, seed=run.cfg.run.seed)
    [latency] = call(service, "measure_batch", [p.tolist()])
    say(f"the pre-trained policy's greedy placement: {latency * 1e3:.4g} ms")
    start = start_placement(env.graph.num_nodes, env.devices, singles, getattr(env, "repair_limits", None))
    if start is not None and not np.array_equal(start, p):
        [latency] = call(service, "measure_batch", [start.tolist()])
        say(f"the run's start (the fastest single device, fitted): {latency * 1e3:.4g} ms")


def _measure_exact(baselines, service, say) -> None:
    """Measure the placement solved on the run's profile (the exact solver's, or HEFT's
    for the parallel objective) through the run's store (``--exact-start``): a placement
    of the run, so sampling around the run's best starts from it when it beats the
    run's own start."""
    from envs.measuring_service import call

    placement = baselines.profile_solution()
    if placement is None:
        say("--exact-start: no solver's placement for this run (it needs a profile of "
            "every device and a solver for the objective); the run starts as it would without")
        return
    [latency] = call(service, "measure_batch", [placement], suggested=True)
    solver = "exact solver's" if "optimum" in baselines.candidates else "HEFT's"
    say(f"the {solver} placement on the profile, the run's first: {latency * 1e3:.4g} ms")


def _measure_etf(env, service, objective: str, say) -> bool:
    """Measure Baechi's m-ETF placement on the run's profile through the run's store
    (``--etf-start``, a critical-path warm start), as :func:`_measure_exact` does the exact
    solver's; whether it was measured."""
    from envs.measuring_service import call
    from envs.baselines import profile_costs
    from policies.solvers.exact import solve

    costs = profile_costs(env)
    if costs is None:  # refused before the run starts (resolve.guide_needs)
        return False
    res = solve(costs, objective, "m-etf")
    if not res.feasible:
        say(f"--etf-start: m-ETF found no placement on the profile ({res.status}); the run "
            "starts as it would without")
        return False
    [latency] = call(service, "measure_batch", [[int(d) for d in res.placement]], suggested=True)
    say(f"m-ETF's placement on the profile (planned in {res.solve_s * 1e3:.3g} ms), the run's "
        f"first: {latency * 1e3:.4g} ms")
    return True
