"""The end of a run: its result, its best placement, its summary, its pictures.

**Which figures.** With the simulator every latency is exact: the run's
result is the best placement its method measured. With a real backend each
placement was timed once, and the minimum over hundreds of noisy timings is
biased low against baselines timed once; so the best few placements the
method measured are timed again next to every baseline, interleaved, on a
measuring machine (:meth:`envs.measuring_service.MeasuringService.remeasure`), and
every figure of the summary (the result, the baselines, the speedups) is a
re-measured one. The raw minimum stays as a diagnostic
(``best_raw_latency_s``), as do the baselines of the run's start
(``baselines_at_start``).

**Whose result.** When the method never measured a feasible placement faster
than the fastest feasible single device, the run's result is that device and
the summary says so (``best_source: "baseline:<DEVICE>_only"``): a run never
ends without a feasible placement when one device can hold the model, and
never presents a baseline as its method's finding. The method's own best
stays in ``method_best_latency_s``.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import Any, Callable, Optional

import numpy as np

from envs.backends import get as get_backend
from envs.baselines import Baselines, single_devices
from hsdag_ray.run.config import TrainConfig
from hsdag_ray.run.rundir import Run

__all__ = ["choose_best", "remeasure_result", "finish", "METHOD_CANDIDATE"]

#: prefix of the method's own placements among re-measured candidates
METHOD_CANDIDATE = "method#"


def choose_best(method_best: Optional[dict], single_device_s: dict[str, float],
                num_nodes: int, devices: list[str]) -> tuple[Optional[dict], str]:
    """The run's best placement and where it comes from (``learner`` or
    ``baseline:<DEVICE>_only``), from the method's best (``latency_s``,
    ``placement``) and the single-device latencies."""
    feasible = {d: t for d, t in single_device_s.items() if t is not None and math.isfinite(t)}
    single = min(feasible, key=feasible.get) if feasible else None
    if method_best is not None and (single is None or method_best["latency_s"] < feasible[single]):
        return method_best, "learner"
    if single is None:
        return None, "none"
    k = devices.index(single)
    return {"latency_s": feasible[single], "placement": [k] * num_nodes}, f"baseline:{single}_only"


def remeasure_result(service, store, baselines: Baselines, rounds: int, say) -> dict[str, Any]:
    """Time the method's best few placements and every baseline again, interleaved.

    Returns ``candidates`` (name -> re-measurement, see
    :meth:`~envs.measuring_service.MeasuringService.remeasure`), ``placements`` (the
    method's candidates: name -> placement), ``rounds`` and ``node``."""
    from envs.measuring_service import call
    from envs.timing import precision_words

    top = store.top()
    cands: dict[str, Any] = {f"{METHOD_CANDIDATE}{i + 1}": t["placement"] for i, t in enumerate(top)}
    placements = dict(cands)
    cands.update(baselines.candidates)
    say(f"timing the best {len(top)} placement(s) again next to {len(baselines.candidates)} "
        f"baseline(s), {rounds} interleaved rounds")
    results = call(service, "remeasure", cands, rounds)
    for name, res in results.items():
        if (res.get("precision") or {}).get("capped"):
            say(f"{name}: {precision_words(res)}")
    return {"candidates": results, "placements": placements, "rounds": rounds,
            "node": call(service, "node")}


def finish(run, run_dir: Run, env, store, state: dict[str, Any],
           baselines: Baselines, remeasured: Optional[dict[str, Any]],
           say: Callable[[str], None]) -> dict[str, Any]:
    """Write ``best_placement.json`` and the pictures; return the summary of ``run``
    (a :class:`hsdag_ray.run.resolved_run.ResolvedRun`)."""
    from hsdag_ray.run import plots

    cfg: TrainConfig = run.cfg

    stats = store.stats()
    raw_best = store.best()
    figures = dict(baselines.latency_s)
    method_best = raw_best
    if remeasured is not None:
        res = remeasured["candidates"]
        figures = {k: res[k]["latency_s"] for k in baselines.latency_s}
        mine = [(res[k]["latency_s"], k) for k in remeasured["placements"] if res[k]["ok"]]
        if mine:
            t, k = min(mine)
            method_best = {"latency_s": t, "placement": remeasured["placements"][k], "name": k}
        else:
            method_best = None
    best, source = choose_best(method_best, single_devices(figures), env.graph.num_nodes, env.devices)
    simulated = get_backend(env.config.backend).simulated  # a cost model gave the latencies
    summary: dict[str, Any] = {
        "model": cfg.run.model, "method": cfg.run.method, "algo": cfg.learning.algo, "backend": env.backend.name,
        # a real backend's sequential figure is its measured latency ("measured"); its
        # throughput figure, a measured pipeline's time per sample, keeps the objective's name
        "objective": cfg.env.objective if simulated or cfg.env.objective != "sequential" else "measured",
        "devices": env.devices, "seed": cfg.run.seed, "features": asdict(cfg.features),
        "cost_features": bool(cfg.features.cost),
        "iterations": state["iteration"], "placements": stats["placements"],
        "measurements": stats["measurements"], "failures": stats["failures"],
        "screened": stats.get("screened", 0), "suggested": stats.get("suggested", 0),
        "suggested_by": run.guide_proposer, "guided_by": list(state.get("guided_by") or []),
        "best_from_guide": bool(raw_best and raw_best.get("suggested")),
        "baselines": figures, "best_latency_s": None,
        "best_source": source,
        "method_best_latency_s": method_best["latency_s"] if method_best else None,
        "speedup_vs_cpu": None, "run_dir": str(run_dir.dir),
        "reference_s": baselines.reference_s, "reference_kind": baselines.reference_kind,
        "exact_start": bool(state.get("exact_start")),
        "etf_start": bool(state.get("etf_start")),
        "profile_measured": run.profile_measured}
    failed = dict(baselines.failed)
    if remeasured is not None:
        failed.update({k: remeasured["candidates"][k]["error"] for k in baselines.latency_s
                       if not remeasured["candidates"][k]["ok"]
                       and remeasured["candidates"][k].get("error")})
    if failed:  # the baselines that did not run (inf), and why
        summary["baselines_failed"] = failed
    if baselines.optimum:
        summary["optimum_method"] = baselines.optimum["method"]
        summary["optimum_proven"] = baselines.optimum["proven"]
        summary["optimum_gap"] = baselines.optimum["gap"]
    if remeasured is not None:
        res = remeasured["candidates"]
        summary["best_raw_latency_s"] = raw_best["latency_s"] if raw_best else None
        summary["baselines_at_start"] = dict(baselines.latency_s)
        summary["remeasured"] = {"rounds": remeasured["rounds"], "node": remeasured["node"],
                                 "candidates": res}
        summary["measured_on"] = remeasured["node"]
        key = (best or {}).get("name") or (source[len("baseline:"):] if source.startswith("baseline:") else None)
        summary["best_spread"] = res[key]["spread"] if key in res else None
        summary["best_interval_s"] = res[key].get("interval_s") if key in res else None
    elif baselines.measured_on:
        summary["measured_on"] = baselines.measured_on
    _machines(summary, [e.get("node") for e in store.log_since(0)], say)
    if source == "none":
        say("no feasible placement: neither the method nor any single device ran the model")
    t_cpu = figures.get("CPU_only", math.nan)
    if best is not None:
        p = np.asarray(best["placement"])
        node_placement = {nm: env.devices[int(d)] for nm, d in zip(env.graph.names, p)}
        (run_dir.dir / "best_placement.json").write_text(
            json.dumps(env.graph.expand_placement(node_placement), indent=1))
        summary["best_latency_s"] = best["latency_s"]
        if t_cpu is not None and math.isfinite(t_cpu):
            summary["speedup_vs_cpu"] = 1 - best["latency_s"] / t_cpu
        what = cfg.run.method if source == "learner" else source
        plots.placed_graph(env.graph, node_placement, env.devices, run_dir.dir / "placement.png",
                           title=f"{cfg.run.model}: best placement, {what} "
                                 f"({best['latency_s'] * 1e3:.3f} ms)")
    if source not in ("learner", "none"):
        say(f"{cfg.run.method} did not beat the fastest single device; the run's best is {source}")
    # every measurement's latency in order (None: it failed): measurements-to-target in tables
    summary["latencies_s"] = list(state["latencies"])
    lat = [x if x is not None else math.inf for x in state["latencies"]]
    plots.learning_curve(lat, run_dir.dir / "learning_curve.png", figures,
                         title=f"{cfg.run.model} / {cfg.run.method} / {env.backend.name}")
    return summary


def _machines(summary: dict[str, Any], nodes: list, say: Callable[[str], None]) -> None:
    """Add the measurements per machine (``measured_by``) and the machines that left
    the cluster during the run (``machines_left``) to ``summary``; say them when the
    run measured on more than one machine or lost one."""
    if not any(nodes):
        return
    from hsdag_ray.run.nodes import machines_of

    measured_by, left = machines_of(nodes)
    summary["measured_by"] = measured_by
    if len(measured_by) > 1 or left:
        say("measurements per machine: " + ", ".join(f"{m} {k}" for m, k in measured_by.items()))
    if left:
        summary["machines_left"] = left
        say(f"{', '.join(left)} left the cluster during the run (its measurements up to then "
            "count); the other machines measured on")
