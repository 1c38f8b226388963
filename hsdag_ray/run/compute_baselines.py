"""Measuring the figures a run is compared with (:class:`envs.baselines.Baselines`): single
devices, the backend's own baselines (OpenVINO's: AUTO and HETERO's own splits, default
and pipeline-parallel; the torch backend's: Accelerate's map), the exact optimum (or, where no exact solver applies, a heuristic's
placement on the profile).

They are measured by a :class:`~envs.measuring_service.MeasuringService`, on a
measuring machine with a real backend (the same kind of machine the run's
placements are timed on), before the run's EnvRunners start. Each keeps the
placement it was measured with, so the run's end can time it again next to
the run's best (:func:`hsdag_ray.run.summary.remeasure_result`). An optimum whose
solver stopped at its time limit is kept with ``proven: False`` and its gap:
every table marks ratios against it as such.
"""
from __future__ import annotations

import math

from envs.base import OwnRun
from envs.baselines import Baselines, profile_costs

__all__ = ["compute_baselines"]


def compute_baselines(service, env, objective: str, say, time_limit: float = 120.0) -> Baselines:
    """Single-device latencies; the backend's own baselines
    (:meth:`envs.base.Backend.own_baselines`: the torch backend's Accelerate
    ``device_map="auto"`` as ``accelerate_auto``; a real OpenVINO backend's AUTO device as
    ``openvino_auto`` and HETERO's own splits as ``hetero_auto`` and ``hetero_pipeline``;
    ``inf`` with the reason in ``failed`` where one cannot run there); and, where an
    exact solver applies to the profile, its placement's latency (``optimum``),
    or, where none applies but a heuristic does (HEFT for ``parallel``), the heuristic's
    placement's (named after it), all measured by ``service`` (the run's backend on a
    measuring machine).
    ``env`` is the driver's copy of the environment (graph, devices, profile)."""
    from envs.measuring_service import call
    from policies.solvers.exact import exact_method, solve

    n = env.graph.num_nodes
    b = Baselines(measured_on=call(service, "node"), **call(service, "reference"))
    for k, (name, t) in enumerate(call(service, "single_devices").items()):
        b.latency_s[f"{name}_only"] = t
        b.candidates[f"{name}_only"] = [k] * n
    for name, own in call(service, "own_baselines").items():
        if isinstance(own, str):  # it could not be made
            b.latency_s[name], b.failed[name] = math.inf, own
            say(f"{name}: cannot be made: {own}")
            continue
        whole = isinstance(own, OwnRun)  # the backend runs the whole model its own way
        b.candidates[name] = name if whole else own
        m = call(service, "measure", b.candidates[name])
        b.latency_s[name] = m["latency_s"] if m["ok"] else math.inf
        if not m["ok"]:
            b.failed[name] = f"{m['stage']}: {m['error']}"
        ran_on = ",".join(m["info"].get("execution_devices") or []) if whole else ""
        say(f"{own.label if whole else name}" + (f" (ran on {ran_on})" if ran_on else "") + ": "
            + (f"{m['latency_s'] * 1e3:.3f} ms" if m["ok"] else f"failed: {m['error']}"))
    cg = profile_costs(env)
    if cg is None:
        return b
    method = exact_method(cg, objective)
    if method is None:
        _heuristic(b, service, cg, objective, say, time_limit)
        return b
    res = solve(cg, objective, method, time_limit=time_limit)
    if not res.feasible:
        say(f"exact solver {method}: {res.status}")
        return b
    placement = [int(d) for d in res.placement]
    m = call(service, "measure", placement)
    b.latency_s["optimum"] = m["latency_s"] if m["ok"] else math.inf
    b.candidates["optimum"] = placement
    b.optimum = {"method": method, "proven": bool(res.optimal),
                 "gap": None if res.optimal else float(res.gap), "profile_value_s": float(res.value)}
    gap = "" if res.optimal else f" (NOT proven optimal: the solver stopped with a gap of {res.gap:.1%})"
    say(f"exact optimum on the profile ({method}): {res.value * 1e3:.3f} ms, measured "
        f"{b.latency_s['optimum'] * 1e3:.3f} ms{gap}")
    return b


def _heuristic(b: Baselines, service, cg, objective: str, say, time_limit: float) -> None:
    """Add the heuristic's placement on the profile to ``b``, measured, where one applies."""
    from envs.measuring_service import call
    from policies.solvers.exact import heuristic_method, solve

    method = heuristic_method(objective)
    if method is None:
        return
    res = solve(cg, objective, method, time_limit=time_limit)
    if not res.feasible:
        say(f"{method} on the profile: {res.status}")
        return
    placement = [int(d) for d in res.placement]
    m = call(service, "measure", placement)
    b.latency_s[method] = m["latency_s"] if m["ok"] else math.inf
    b.candidates[method] = placement
    say(f"{method} on the profile: {res.value * 1e3:.3f} ms, measured "
        + (f"{m['latency_s'] * 1e3:.3f} ms" if m["ok"] else f"failed: {m['error']}"))
