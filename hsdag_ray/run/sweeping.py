"""A sweep of training runs on Ray Tune, what ``python -m hsdag_ray.sweep`` runs.

:class:`SweepConfig` is one sweep (models x methods x variants x guide modes x seeds);
:func:`trials` its grid; :func:`run_trial` one trial's training run
(:func:`hsdag_ray.run.training.train`), idempotent, so a resumed sweep runs only what is
unfinished; :func:`run_sweep` schedules the trials with Ray Tune
(:mod:`hsdag_ray.run.sweep_trials`: their resources, a stop by a signal) and writes the
results tables (:mod:`hsdag_ray.run.results`, :mod:`hsdag_ray.run.sweep_table`).
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envs.backends import SIMULATOR
from hsdag_ray.cli import UsageError, writable_dir
from hsdag_ray.run.config import TrainConfig
from hsdag_ray.run.rundir import absolute_model, model_label, slug
from hsdag_ray.run.sweep_trials import (SweepInterrupted, _check_resources, _measures, _resources,
                                        _Signals)

#: the backend of a sweep's trials when it names none
SWEEP_BACKEND = SIMULATOR

__all__ = ["SweepConfig", "PRESETS", "ABLATION_VARIANTS", "GUIDE_MODES", "SWEEP_BACKEND", "trials",
           "run_trial", "run_sweep"]

#: the paper's ablation: HSDAG with one feature group off at a time
ABLATION_VARIANTS: dict[str, dict[str, Any]] = {
    "full": {},
    "no structural": {"fractal": False, "degree": False},
    "no output shape": {"shape": False},
    "no node id": {"position": "none"},
}

#: named sweeps: settings a preset fills in (flags and the sweep file still win)
PRESETS: dict[str, dict[str, Any]] = {
    "ablation": {"models": ["resnet50", "inception_v3", "bert_base"], "methods": ["hsdag"],
                 "variants": ABLATION_VARIANTS},
}


@dataclass
class SweepConfig:
    """One sweep.

    Attributes:
        models: models of the grid (zoo names, tv:/hf: names or files).
        methods: methods of the grid (``python -m hsdag_ray.train --help``); default: all.
        seeds: seeds of the grid.
        budget: placements per run (every method the same).
        variants: name -> training settings of that variant (the ablation preset's
            feature groups); one unnamed variant by default.
        guide: off (every method as published, the default), on (every method with the
            project's search aids, ``train --guide``) or both (each trial both ways, side
            by side in the table).
        train: training settings every trial shares.
        out: folder of sweeps.
        name: sweep folder name (and W&B group); the same name resumes it.
        address: Ray address to join (``auto``: a running cluster); empty = a local Ray.
        max_concurrent: trials at a time (0 = as many as the cluster's resources allow).
        preset: the preset the sweep was made from (``ablation``), or empty.
    """

    models: list[str] = field(default_factory=lambda: ["tiny_cnn"])
    methods: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    budget: int = 500
    variants: dict[str, dict[str, Any]] = field(default_factory=lambda: {"": {}})
    guide: str = "off"
    train: dict[str, Any] = field(default_factory=dict)
    out: str = "sweeps"
    name: str = "sweep"
    address: str = ""
    max_concurrent: int = 0
    preset: str = ""

    def trial_config(self, trial: dict[str, Any], runs: Path) -> TrainConfig:
        values = {**self.train, **self.variants[trial["variant"]], "model": trial["model"],
                  "method": trial["method"], "seed": trial["seed"], "budget": self.budget,
                  "out": str(runs), "name": trial["name"], "address": "",
                  "guide": bool(trial.get("guided"))}
        try:
            cfg = TrainConfig.of(**values)
        except TypeError as e:
            raise UsageError(f"bad training setting in the sweep: {e}") from None
        return cfg


#: ``guide`` of a sweep -> whether its trials run guided (in this order)
GUIDE_MODES = {"off": (False,), "on": (True,), "both": (False, True)}


def trials(sc: SweepConfig) -> list[dict[str, Any]]:
    """The grid: one dict (name, model, method, variant, guided, seed) per trial."""
    out = []
    for model in sc.models:
        for method in sc.methods:
            for variant in sc.variants:
                for guided in GUIDE_MODES[sc.guide]:
                    for seed in sc.seeds:
                        name = "-".join(p for p in (model_label(model), method, slug(variant),
                                                    "guided" if guided else "", f"s{seed}") if p)
                        out.append({"name": name, "model": model, "method": method,
                                    "variant": variant, "guided": guided, "seed": int(seed)})
    return out


def run_trial(cfg: TrainConfig, run_dir: Path) -> dict[str, Any]:
    """One trial's training run, idempotent: a finished run folder is read, not run
    again; one with a checkpointed state continues; anything else starts afresh."""
    from hsdag_ray.run.results import load_summary
    from hsdag_ray.run.rundir import Run
    from hsdag_ray.run.training import train

    summary = load_summary(run_dir)
    if summary is not None:
        return summary
    # a checkpoint that verifies (the trial was stopped or killed on the way): continued
    resume = run_dir if (run_dir / "config.json").is_file() and Run(cfg, run_dir).has_checkpoint() \
        else None
    if resume is None and run_dir.exists():
        shutil.rmtree(run_dir)  # started, but nothing to continue from
    return train(cfg, resume=resume, quiet=True, library_log=True)


def _trainable(config: dict[str, Any]) -> None:
    """The Tune trial: its training run, reported once at the end."""
    from ray import tune

    sc = SweepConfig(**config["sweep"])
    trial = config["trial"]
    runs = Path(config["runs"])
    # W&B runs of one sweep in one group (wandb.init reads it from the environment)
    os.environ["WANDB_RUN_GROUP"] = sc.name
    os.environ.setdefault("WANDB_MODE", "online" if sc.train.get("wandb") == "online" else "offline")
    s = run_trial(sc.trial_config(trial, runs), runs / trial["name"])
    tune.report({"best_latency_s": s.get("method_best_latency_s"), "measurements": s["measurements"],
                 "placements": s["placements"], "wall_s": s.get("wall_s"), "done": True})


def _check(sc: SweepConfig) -> list[dict[str, Any]]:
    from hsdag_core.errors import GraphError
    from hsdag_core.models import check_model_spec
    from hsdag_ray.run.resolve import unmet_needs
    from policies.registry import METHODS

    every = not sc.methods
    if every:
        sc.methods = list(METHODS)
    for m in sc.methods:
        if m not in METHODS:
            raise UsageError(f"unknown method {m!r}; choose among {', '.join(METHODS)}")
    if not sc.models or not sc.seeds:
        raise UsageError("a sweep needs at least one model and one seed (--models, --seeds)")
    for model in sc.models:
        try:
            check_model_spec(model)
        except GraphError as e:
            raise UsageError(f"{e} (in --models)") from None
    # a trial runs in its own folder: a model file is named by its absolute path
    sc.models = [absolute_model(m) for m in sc.models]
    if sc.guide not in GUIDE_MODES:
        raise UsageError(f"unknown guide {sc.guide!r}; choose {', '.join(GUIDE_MODES)}")
    if sc.budget < 1 or sc.max_concurrent < 0:
        raise UsageError("--budget must be at least 1 and --max-concurrent 0 or more")
    grid = trials(sc)
    backends, unmet = set(), {}
    for t in grid:
        cfg = sc.trial_config(t, Path(sc.out))
        cfg.validate()
        backends.add(cfg.env.backend)
        why = unmet_needs(cfg)
        if why:
            unmet[t["method"]] = why
    if unmet and not every:
        raise UsageError(next(iter(unmet.values())) + "; or leave it out of --methods")
    if unmet:  # every method by default: those the settings cannot run are left out
        sc.methods = [m for m in sc.methods if m not in unmet]
        grid = [t for t in grid if t["method"] not in unmet]
    if "default" in backends:
        raise UsageError("a sweep needs an explicit backend (train: {backend: simulator} or auto, "
                         "hetero, pipeline) so every trial measures the same way")
    return grid


def run_sweep(sc: SweepConfig, say=print) -> list[dict[str, Any]]:
    """Run (or resume) the sweep; write and return the results rows. Interrupted (SIGINT,
    SIGTERM): the running trials stop, the table of the finished ones is written and says
    it is partial, and :class:`SweepInterrupted` is raised."""
    import ray
    from ray import tune

    from hsdag_ray.run.local_ray import start_or_join
    from hsdag_ray.run.results import load_summary, write_all
    from hsdag_ray.run.sweep_table import failed_trials, gather, mark_partial
    from hsdag_ray.run.rundir import absolute

    grid = _check(sc)
    folder = absolute(Path(sc.out) / sc.name)
    runs = writable_dir(folder / "runs")
    spec_file = folder / "sweep.json"
    spec = asdict(sc) | {"out": str(absolute(sc.out)), "address": ""}
    if spec_file.is_file():
        old = json.loads(spec_file.read_text())
        if {k: v for k, v in old.items() if k not in ("max_concurrent",)} != \
                {k: v for k, v in spec.items() if k not in ("max_concurrent",)}:
            raise UsageError(f"the sweep folder {folder} holds another sweep; choose another --name "
                             "or --out, or repeat that sweep's settings to resume it")
    spec_file.write_text(json.dumps(spec, indent=1))
    done = [t for t in grid if load_summary(runs / t["name"]) is not None]
    say(f"sweep {sc.name}: {len(grid)} trials ({len(sc.models)} model(s) x {len(sc.methods)} "
        f"method(s) x {len(sc.variants)} variant(s) x {len(GUIDE_MODES[sc.guide])} guide mode(s) "
        f"x {len(sc.seeds)} seed(s)), "
        f"{len(done)} finished already; folder {folder}")

    wandb_mode = "online" if sc.train.get("wandb") == "online" else "offline"
    os.environ.setdefault("WANDB_MODE", wandb_mode)  # before ray.init: the workers inherit it
    signals = _Signals().__enter__()
    errored: set[str] = set()
    # on one machine that measures (as a local training run's Ray): one measuring slot,
    # so the trials' measurements never overlap
    started = start_or_join(sc.address, any(_measures(sc.trial_config(t, runs)) for t in grid),
                            {"WANDB_MODE": os.environ["WANDB_MODE"], "OMP_NUM_THREADS": "1"})
    try:
        first = sc.trial_config(grid[0], runs)
        resources = _resources(sc, first)
        _check_resources(resources, first)
        trainable = tune.with_resources(_trainable, resources)
        tune_dir = folder / "tune"
        if tune.Tuner.can_restore(str(tune_dir / "trials")):
            tuner = tune.Tuner.restore(str(tune_dir / "trials"), trainable=trainable,
                                       resume_unfinished=True, resume_errored=True)
        else:
            tuner = tune.Tuner(
                trainable,
                param_space={"sweep": asdict(sc), "runs": str(runs), "trial": tune.grid_search(grid)},
                tune_config=tune.TuneConfig(max_concurrent_trials=sc.max_concurrent or None,
                                            reuse_actors=True),  # imports paid once per slot
                run_config=tune.RunConfig(name="trials", storage_path=str(tune_dir), verbose=0,
                                          failure_config=tune.FailureConfig(max_failures=1)))
        errored = failed_trials(tuner.fit())
    finally:
        if started:
            ray.shutdown()
        signals.__exit__()
    rows, summaries, missing, why = gather(grid, runs, errored)
    title = "HSDAG feature ablation" if sc.preset == "ablation" else f"sweep {sc.name}"
    if rows:
        rows = write_all(rows, summaries, folder, title)
        say(f"results: {folder / 'results.md'}, results.csv, results.png")
    # trials neither finished nor failed: the sweep was stopped (SIGINT/SIGTERM to Tune)
    interrupted = signals.signum is not None or any(n not in errored for n in missing)
    if missing and interrupted:
        mark_partial(folder, len(grid), why)
        raise SweepInterrupted(signals.signum or 2, missing)
    if missing:
        mark_partial(folder, len(grid), why)
        say(f"{len(missing)} trial(s) failed ({', '.join(missing[:3])}{'...' if len(missing) > 3 else ''}); "
            f"their libraries.log says why; run the same command again to retry them")
    return rows
