"""A training run from its start to its summary: :func:`train`, what ``python -m
hsdag_ray.train`` runs.

:func:`train` resolves the run once (:func:`hsdag_ray.run.resolved_run.resolve_run`),
starts or joins Ray, opens the measurement store, measures the baselines and the first
placements (:func:`hsdag_ray.run.run_start.measure_start`), moves its driver one iteration
at a time within the budget and its caps, checkpointing, then re-measures and writes the
summary (:func:`hsdag_ray.run.summary.finish`) and the run folder. A resumed run continues
from its latest checkpoint that verifies.
"""
from __future__ import annotations

import json
import re
import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Optional

from hsdag_ray import console
from hsdag_ray.cli import RunError, UsageError
from hsdag_ray.run.config import MEASURE_RESOURCE, TrainConfig
from hsdag_ray.run.resolved_run import ResolvedRun, resolve_run
from hsdag_ray.run.rundir import Run
from hsdag_ray.run.tracking import Tracker
from hsdag_ray.run.run_start import measure_start

__all__ = ["train", "PROPOSAL_CAP", "SCREEN_CAP", "MAX_EMPTY_ITERATIONS"]


def _start_ray(cfg: TrainConfig, real: bool) -> bool:
    """Start (or join, with ``--address``) Ray unless it runs already; True if started here."""
    from hsdag_ray.run.local_ray import start_or_join

    return start_or_join(cfg.run.address, real, {"OMP_NUM_THREADS": str(cfg.run.torch_threads),
                                             "WANDB_MODE": os.environ["WANDB_MODE"]})


def _measuring_runners(cfg: TrainConfig, real: bool, devices: list[str],
                       say) -> tuple[int, Optional[dict[str, float]]]:
    """EnvRunners of the run (with a real backend at most one per measuring machine that
    has the run's devices, and on CUDA devices the GPUs they need in Ray) and what each
    measuring actor asks for besides its GPUs (None: simulator). A machine that names
    CUDA devices without holding GPUs in Ray is not counted: an EnvRunner asking for
    them there would wait forever."""
    from hsdag_ray.run.nodes import measuring_gpus, measuring_resources, measuring_slots

    if not real:
        return cfg.run.env_runners, None
    resources = measuring_resources(devices)
    gpus = measuring_gpus({"backend": cfg.env.backend, "devices": devices})
    slots = measuring_slots({**resources, "GPU": gpus} if gpus else resources)
    if slots < 1 and gpus and measuring_slots(resources) > 0:
        raise UsageError(f"no measuring machine with the devices {', '.join(devices)} has the "
                         f"{gpus} GPU(s) they need in Ray (a measuring actor holds the GPUs it "
                         f"measures on); start Ray there with --num-gpus={gpus} or more")
    if slots < 1:
        raise UsageError(f"no machine in the cluster advertises the {MEASURE_RESOURCE!r} "
                         "resource; start measuring nodes as in cluster/config.yaml")
    if len(resources) > 1:
        say(f"measuring on the {slots} machine(s) with the devices {', '.join(devices)}")
    if cfg.run.env_runners > slots:
        say(f"{slots} measuring machine(s): using {slots} EnvRunner(s), one per machine")
        return slots, resources
    return cfg.run.env_runners, resources


def _metrics_row(state: dict[str, Any], new: list[dict], stats: dict[str, Any],
                 before: dict[str, Any], method_metrics: dict[str, Optional[float]],
                 single_device_s: dict[str, float], seconds: float, wall_s: float) -> dict[str, Any]:
    """One ``metrics.jsonl`` row: the iteration's placements and the run so far
    (``before``: the store's stats before the iteration)."""
    import numpy as np

    lat = [e["latency_s"] if e["ok"] else math.inf for e in new]
    ok_lat = [x for x in lat if math.isfinite(x)]
    best = stats["best_latency_s"]
    t_cpu = single_device_s[console.reference_device(list(single_device_s))]
    t_single = min(single_device_s.values())

    def speedup(t_ref: float) -> Optional[float]:
        return (1 - best / t_ref) if best and math.isfinite(t_ref) else None

    return {"iteration": state["iteration"], "placements": stats["placements"],
            "measurements": stats["measurements"], "failures": stats["failures"],
            "cache_hits": stats["cache_hits"], "screened": stats.get("screened", 0),
            "suggested": stats.get("suggested", 0),
            "feasible_fraction": (stats["feasible_placements"] - before["feasible_placements"])
            / max(stats["placements"] - before["placements"], 1),
            "latency_mean_s": float(np.mean(ok_lat)) if ok_lat else None,
            "latency_min_s": min(ok_lat) if ok_lat else None, "best_latency_s": best,
            "speedup_vs_cpu": speedup(t_cpu), "speedup_vs_best_single": speedup(t_single),
            **method_metrics, "measurements_per_s": len(new) / max(seconds, 1e-9),
            "wall_s": wall_s}


def _checkpoint(driver, store, run_dir: Run, state: dict[str, Any]) -> None:
    """The run's state (policy, measurement store, ``state``) as one new checkpoint
    folder, complete or absent whenever the process dies (:meth:`Run.commit_checkpoint`)."""
    run_dir.commit_checkpoint(state["iteration"], driver.save, state, store.get_state())


def train(cfg: TrainConfig, resume: Optional[Path] = None, quiet: bool = False,
          on_iteration: Optional[Callable[[Any, dict[str, Any]], None]] = None,
          library_log: bool = False) -> dict[str, Any]:
    """Run (or continue) a training run; return its summary.

    ``on_iteration(handle, metrics_row)`` is called after every iteration with
    the method's handle (the RLlib algorithm for a learned method) and the row
    written to ``metrics.jsonl``. ``library_log`` sends what the libraries
    print to the run's ``libraries.log`` instead of the console.
    """
    say = console.say(quiet)
    run_dir = Run(cfg, resume)
    with console.libraries_to(run_dir.dir / "libraries.log" if library_log else None):
        return _train(cfg, run_dir, resume, quiet, say, on_iteration)


#: a run stops when this many iterations in a row, over at least STALL_S seconds, measured
#: no placement (every EnvRunner failing, and failing again when restarted)
MAX_EMPTY_ITERATIONS = 5
#: with --budget-unit measurements, a run stops after this many times its budget in
#: placements proposed even when fewer were new (a settled policy proposes few new ones)
PROPOSAL_CAP = 5
#: with --budget-unit measurements and --screen, a run stops after this many times its
#: budget in placements screened (predicted, not measured: cheap, but not free)
SCREEN_CAP = 10
STALL_S = 30.0


def _within_caps(stats: dict[str, Any], cap: int, target: int) -> bool:
    screened = stats.get("screened", 0)
    return stats["placements"] - screened < cap and screened < SCREEN_CAP * target


def _loop(cfg: TrainConfig, driver, store, state: dict[str, Any], run_dir: Run, tracker,
          progress, single_device_s: dict[str, float], on_iteration, guide=None) -> None:
    """Iterate until the budget is reached (placements proposed, or with ``budget_unit``
    measurements, at most ``PROPOSAL_CAP`` times as many proposed and not screened, and
    ``SCREEN_CAP`` times as many screened); checkpoint on the way. ``guide``
    (``--refit-every``, :class:`policies.search.refit_guide.RefitGuide`; ``--neighbour-every``,
    :class:`policies.search.neighbour_guide.NeighbourGuide`) queues its proposals in the store
    between iterations."""
    wall_before, t_loop, empty, t_progress = state["wall_s"], time.time(), 0, time.time()
    target = max(cfg.run.budget, 1)  # budget 0 (zero-shot): the one iteration that places
    if not run_dir.has_checkpoint() or state["iteration"] == 0:
        # the start (baselines, first placements) checkpointed: a run killed from here on
        # resumes, never starts over; the metrics rows written after the latest
        # checkpoint are cut back when resumed (Run.truncate_metrics)
        _checkpoint(driver, store, run_dir, state)
    cap = target * (PROPOSAL_CAP if cfg.run.budget_unit == "measurements" else 1)
    while ((stats := store.stats())[cfg.run.budget_unit] < target and _within_caps(stats, cap, target)
           and not driver.done):
        t_it = time.time()
        before = stats  # the loop test's count: the store is not asked twice per iteration
        method_metrics = driver.iterate()
        stats = store.stats()
        if stats["placements"] == before["placements"]:
            empty += 1
            time.sleep(1.0)  # failed EnvRunners are being restarted
            if empty >= MAX_EMPTY_ITERATIONS and time.time() - t_progress >= STALL_S:
                errors = store.errors()
                raise RunError(f"no placement was measured in {empty} iterations in a row: every "
                               "measuring EnvRunner failed"
                               + (f"; the last error: {errors[-1]}" if errors else
                                  "; the workers' logs say why (ray logs)"))
            continue
        empty, t_progress = 0, time.time()
        state["iteration"] += 1
        new = store.log_since(state["log_index"])
        state["log_index"] += len(new)
        state["latencies"] += [e["latency_s"] if e["ok"] else None for e in new]
        row = _metrics_row(state, new, stats, before, method_metrics, single_device_s,
                           time.time() - t_it, wall_before + time.time() - t_loop)
        run_dir.append_metrics(row)
        tracker.log(row, step=state["iteration"])
        if on_iteration is not None:
            on_iteration(driver.handle, row)
        if guide is not None:
            guide.after_iteration()
        progress.update(row)
        state["wall_s"] = row["wall_s"]
        if state["iteration"] % cfg.run.checkpoint_every == 0:
            _checkpoint(driver, store, run_dir, state)


def _guide(run: ResolvedRun, env, store):
    """With ``--refit-every``: refit's search on the driver; with ``--neighbour-every``: the
    untried neighbours of the run's best; else None."""
    cfg, proposer = run.cfg, run.guide_proposer
    if proposer == "refit":
        from policies.search.refit_guide import RefitGuide

        return RefitGuide(env, store, cfg.guide.refit_every, seed=cfg.run.seed, objective=cfg.env.objective)
    if proposer == "neighbours":
        from policies.search.neighbour_guide import NeighbourGuide

        return NeighbourGuide(env, store, run.neighbour_every, seed=cfg.run.seed, objective=cfg.env.objective,
                              ranked=cfg.guide.neighbour_order == "profile")
    return None


def _train(cfg: TrainConfig, run_dir: Run, resume: Optional[Path], quiet: bool, say,
           on_iteration) -> dict[str, Any]:
    """The run's steps: resolve it once (:func:`hsdag_ray.run.resolved_run.resolve_run`),
    start Ray, open the measurement store, measure the baselines and first placements,
    learn until the budget is spent, then re-measure and summarise."""
    import ray
    import torch

    t_start = time.time()
    run = resolve_run(cfg, say, store=_store_name(run_dir))
    torch.set_num_threads(run.cfg.run.torch_threads)
    os.environ.setdefault("WANDB_MODE", "offline" if cfg.run.wandb != "online" else "online")
    restored = _restore_point(run_dir, resume, say)
    started_ray = _start_ray(run.cfg, run.real)
    try:
        store = _open_store(run.env_config["store"], restored)
        state = restored.state if restored is not None else Run.fresh_state()
        wall_before = state["wall_s"]  # of the sessions before this one
        state.setdefault("started_at", t_start)  # the clock of curve.jsonl
        run = run.with_runners(*_measuring_runners(run.cfg, run.real, list(run.devices), say))
        env = _describing_env(run, say)
        baselines = measure_start(run, env, store, state, say)
        # a run that measured the profile's solution as its own says so in its summary
        state["exact_start"] = run.starts_exact and baselines.profile_solution() is not None
        state["guided_by"] = list(run.guide_parts)
        (run_dir.dir / "config.json").write_text(json.dumps(run.to_json(), indent=1))
        driver = _driver(run, env, baselines, restored, run_dir, state, say)
        tracker = Tracker(cfg.run.wandb, cfg.run.wandb_project, run_dir.dir, run.settings.to_dict(),
                          name=run_dir.dir.name, resume=resume is not None)
        _learn(run, driver, store, state, run_dir, tracker, env, baselines, quiet, on_iteration, say)
        summary = _finish(run, run_dir, driver, store, state, env, baselines, say)
        summary["wall_s"] = time.time() - t_start + wall_before
        _write_curve(run_dir, store, state, summary)
        tracker.finish(summary, [run_dir.dir / "best_placement.json", run_dir.dir / "placement.png",
                                 run_dir.dir / "learning_curve.png"])
        run_dir.write_json("summary.json", summary)  # whole or absent: a sweep reads it as done
        return summary
    finally:
        if started_ray:
            ray.shutdown()


def _restore_point(run_dir: Run, resume: Optional[Path], say):
    """Resumed: the latest checkpoint that verifies, with its state and store, checked
    before Ray starts; the metrics rows after it are cut (their iterations run again)."""
    if resume is None:
        return None
    restored = run_dir.restore_point(say)
    run_dir.truncate_metrics(restored.iteration if restored is not None else 0)
    return restored


def _store_name(run_dir: Run) -> str:
    """The name of the run's measurement store actor (one per run folder)."""
    return "hsdag_store_" + re.sub(r"[^A-Za-z0-9_.-]", "_", run_dir.dir.as_posix())[-120:]


def _open_store(store_name: str, restored):
    """The run's measurement store (a named Ray actor, holding a resumed run's measurements)."""
    from envs.store import StoreClient, store_actor

    store = StoreClient(store_actor(store_name))
    store.stats()  # created and registered before any environment connects to it
    if restored is not None:
        store.set_state(restored.store)
    return store


def _describing_env(run: ResolvedRun, say):
    """The driver's copy of the method's environment: it describes the graph and devices
    and measures nothing."""
    from envs.placement_env import EnvConfig
    from policies.registry import load

    env = load(run.method.env)(EnvConfig.from_dict({**run.env_config, "measure_reference": False}))
    say(f"graph {env.graph.name}: {env.graph.num_nodes} nodes after {run.cfg.env.coarsen} coarsening; "
        f"devices {', '.join(env.devices)}; backend {env.backend.name}")
    return env


def _driver(run: ResolvedRun, env, baselines, restored, run_dir: Run, state: dict[str, Any], say):
    """The method's driver (its RLlib algorithm, or a search or solver), restored from the
    checkpoint when the run resumes."""
    from hsdag_ray.run.drivers import make_driver

    driver = make_driver(run, env, baselines.single_devices())
    if restored is not None:
        try:
            driver.restore(restored.policy)
        except Exception as e:  # verified files RLlib still cannot read (an old layout's)
            driver.stop()
            raise UsageError(f"the checkpoint {restored.folder} cannot be restored "
                             f"({type(e).__name__}), so the run cannot be resumed; start a "
                             "new run") from None
        say(f"resumed {run_dir.dir} at iteration {state['iteration']}")
    return driver


def _learn(run: ResolvedRun, driver, store, state: dict[str, Any], run_dir: Run,
           tracker, env, baselines, quiet: bool, on_iteration, say) -> None:
    """Iterate with progress shown until the budget is spent; say why when the run stops
    short of it."""
    cfg = run.cfg
    planned = cfg.run.budget or cfg.run.zero_shot_samples  # budget 0: the zero-shot placements
    progress = console.Progress(planned, store.stats()[cfg.run.budget_unit], quiet,
                                reference=console.reference_device(env.devices),
                                optimum_s=baselines.latency_s.get("optimum"), unit=cfg.run.budget_unit,
                                optimum_label=console.optimum_label(run.profile_measured))
    try:
        _loop(cfg, driver, store, state, run_dir, tracker, progress, baselines.single_devices(),
              on_iteration, _guide(run, env, store))
    finally:
        progress.close()
    stats = store.stats()
    if stats[cfg.run.budget_unit] < cfg.run.budget and not driver.done:
        screened = stats.get("screened", 0)
        say(f"stopped at {stats['placements']} placements proposed"
            + (f" ({screened} screened)" if screened else "")
            + f" with {stats['measurements']} of {cfg.run.budget} measured: the policy proposes "
            "placements it has measured before" + (" or that the screen predicts slower"
                                                   if screened else ""))


def _finish(run: ResolvedRun, run_dir: Run, driver, store, state: dict[str, Any], env,
            baselines, say) -> dict[str, Any]:
    """The last checkpoint, the driver stopped (freeing the measuring slots), on real
    devices the best placements and every baseline re-measured, and the run's summary."""
    from envs.measuring_service import measuring_service, release
    from hsdag_ray.run.summary import finish, remeasure_result

    _checkpoint(driver, store, run_dir, state)
    driver.stop()
    remeasured = None
    if run.real:
        service = measuring_service(run.env_config, run.real, run.resources)
        try:
            remeasured = remeasure_result(service, store, baselines, run.cfg.run.remeasure_rounds, say)
        finally:
            release(service)
    return finish(run, run_dir, env, store, state, baselines, remeasured, say)


def _write_curve(run_dir: Run, store, state: dict[str, Any], summary: dict[str, Any]) -> None:
    """``curve.jsonl``: the run's best after every measurement (:func:`envs.measurer.best_curve`),
    with the seconds from the run's start to the end of that measurement (its baselines
    and the method's planning included; a resumed run's include the time it was
    stopped); the summary's ``measured_at_s`` holds those seconds beside ``latencies_s``."""
    from envs.measurer import best_curve

    curve = best_curve(store.log_since(0), state["started_at"])
    (run_dir.dir / "curve.jsonl").write_text("".join(json.dumps(r) + "\n" for r in curve))
    summary["measured_at_s"] = [r["wall_s"] for r in curve]
