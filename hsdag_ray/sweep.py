"""Sweeps: models x methods x seeds with Ray Tune: ``python -m hsdag_ray.sweep``.

Every trial is a normal training run (:func:`hsdag_ray.train.train`, in the
trial's own process) with its own run folder under ``<out>/<name>/runs/``;
Ray Tune schedules the trials over the machines of the cluster (each trial
asks for one CPU, plus one CPU per EnvRunner with the simulator or one
measuring slot per EnvRunner with real devices, with its GPUs on CUDA devices, so on
a cluster trials spread over the measuring machines). W&B runs of one sweep share a group (the sweep
name), offline unless ``wandb: online``.

At the end it writes ``results.csv``, ``results.md`` and ``results.png`` in
the sweep folder: per model and method the best latency (median and range
over seeds), the speedup over CPU-only, the ratio to the exact optimum, the
measurements used and the wall time, next to the baselines every run was
compared with (single devices, OpenVINO AUTO with real devices, the exact
optimum); see :mod:`hsdag_ray.run.results`. Run again with the same ``--out`` and
``--name``, an interrupted sweep resumes: finished trials are not run again,
an unfinished one continues its run folder from its last checkpoint.

Examples::

    python -m hsdag_ray.sweep --models tiny_cnn,tv:squeezenet1_1 --methods hsdag,random,anneal \\
        --seeds 0,1 --budget 100
    python -m hsdag_ray.sweep --models tiny_cnn --methods hsdag,gdp,refit,exact --guide both
    python -m hsdag_ray.sweep --config sweep.yaml
    python -m hsdag_ray.sweep --preset ablation --seeds 0,1,2
    python -m hsdag_ray.sweep --config sweep.yaml --address auto     # on a running cluster
    python -m hsdag_ray.sweep --models doppler:gdp_ffnn_192nodes.txt --methods hsdag,m-etf,exact \\
        --objective parallel --seeds 0 --budget 100               # a DOPPLER graph, its scoring

A sweep file names any of the flags (without dashes) and ``train:``, a mapping
of training settings every trial shares (the long options of
``python -m hsdag_ray.train --help`` without dashes)::

    models: [resnet50, inception_v3, bert_base]
    methods: [hsdag, placeto, random, anneal]
    seeds: [0, 1, 2]
    budget: 500
    train: {backend: simulator, env_runners: 0}
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from envs.backends import BACKENDS, SIMULATOR
from hsdag_ray.cli import UsageError, read_yaml_mapping, run, writable_dir
from hsdag_ray.run.config import TrainConfig
from hsdag_ray.run.rundir import absolute_model, model_label, slug
from hsdag_ray.run.sweep_trials import (SweepInterrupted, _check_resources, _measures, _resources,
                                   _Signals)

#: the backend of a sweep's trials when it names none
SWEEP_BACKEND = SIMULATOR

__all__ = ["SweepConfig", "PRESETS", "ABLATION_VARIANTS", "GUIDE_MODES", "trials", "run_trial", "run_sweep",
           "main"]

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
    from hsdag_ray.train import train

    from hsdag_ray.run.rundir import Run

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


def _list(text: Optional[str], cast=str) -> Optional[list]:
    if text is None:
        return None
    try:
        return [cast(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"{text!r} is not a comma-separated list of {cast.__name__}") from None


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m hsdag_ray.sweep", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", help="sweep YAML file (flags win)")
    ap.add_argument("--preset", choices=sorted(PRESETS), help="a named sweep: ablation = HSDAG with "
                    "each feature group off on ResNet-50, Inception-V3 and BERT, its own table")
    ap.add_argument("--models", help="comma-separated models (default tiny_cnn)")
    ap.add_argument("--methods", help="comma-separated methods (default: every registered one)")
    ap.add_argument("--seeds", help="comma-separated seeds (default 0,1,2)")
    ap.add_argument("--budget", type=int, help="placements per run (default 500)")
    ap.add_argument("--out", help="folder of sweeps (default sweeps/)")
    ap.add_argument("--name", help="sweep name: its folder and W&B group; the same name resumes it "
                    "(default: sweep, or the preset's name)")
    ap.add_argument("--address", help="Ray address to join (auto = a running cluster); default a "
                    "local Ray")
    ap.add_argument("--max-concurrent", type=int, help="trials at a time (default: as resources allow)")
    ap.add_argument("--guide", choices=tuple(GUIDE_MODES), help="the project's search aids "
                    "(train --guide): off = every method as published (default), on = every "
                    "method guided, both = each trial both ways, side by side in the table")
    ap.add_argument("--backend", help="training backend of every trial (default simulator)")
    ap.add_argument("--wandb", choices=("offline", "online", "disabled"),
                    help="W&B mode of every trial (default offline)")
    ap.add_argument("--objective", help="objective of every trial (train --objective; default "
                    "sequential; parallel is DOPPLER's, latency Tarnawski et al.'s)")
    return ap


def config_from_args(argv: Optional[Sequence[str]]) -> SweepConfig:
    args = build_parser().parse_args(argv)
    values: dict[str, Any] = {"train": {"backend": SWEEP_BACKEND}}
    if args.config:
        data = read_yaml_mapping(args.config, "sweep file")
        known = {f.name for f in dataclasses.fields(SweepConfig)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise UsageError(f"unknown setting {unknown[0]!r} in {args.config}; settings are "
                             f"{', '.join(sorted(known))}")
        preset = args.preset or data.get("preset")
        if preset:
            if preset not in PRESETS:
                raise UsageError(f"unknown preset {preset!r}; choose {', '.join(PRESETS)}")
            values.update(PRESETS[preset], name=preset, preset=preset)
        train = {**values["train"], **(data.pop("train", None) or {})}
        values.update(data)
        values["train"] = train
    elif args.preset:
        values.update(PRESETS[args.preset], name=args.preset, preset=args.preset)
    for key, cast in (("models", str), ("methods", str), ("seeds", int)):
        v = _list(getattr(args, key), cast)
        if v is not None:
            values[key] = v
    for key in ("budget", "out", "name", "address", "max_concurrent", "guide"):
        if getattr(args, key) is not None:
            values[key] = getattr(args, key)
    for key in ("backend", "wandb", "objective"):
        if getattr(args, key) is not None:
            values["train"] = {**values["train"], key: getattr(args, key)}
    for key in ("models", "methods"):
        if isinstance(values.get(key), str):
            values[key] = _list(values[key])
    if isinstance(values.get("seeds"), (str, int)):
        values["seeds"] = _list(values["seeds"], int)
    train = TrainConfig.of(**values["train"])  # refuses an unknown setting before any trial
    kind = BACKENDS.get(train.env.backend if train.env.backend != "default" else SWEEP_BACKEND)
    if kind is not None and kind.simulated:
        # trials run side by side already; with the simulator each samples in its own process
        values["train"] = {"env_runners": 0, **values["train"]}
    return SweepConfig(**values)


def main(argv: Optional[Sequence[str]] = None) -> int:
    sc = config_from_args(argv)
    try:
        run_sweep(sc)
    except SweepInterrupted as e:
        args = list(sys.argv[1:] if argv is None else argv)
        print(f"hsdag_ray.sweep: interrupted; {len(e.missing)} trial(s) not finished, the finished "
              "ones are kept; resume with: python -m hsdag_ray.sweep " + " ".join(args), file=sys.stderr)
        return e.code
    return 0


if __name__ == "__main__":
    sys.exit(run(main, prog="hsdag_ray.sweep"))
