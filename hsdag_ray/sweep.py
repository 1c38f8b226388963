"""Sweeps: models x methods x seeds with Ray Tune: ``python -m hsdag_ray.sweep``.

Every trial is a normal training run (:func:`hsdag_ray.run.training.train`, in the
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
import sys
from typing import Any, Optional, Sequence

from envs.backends import BACKENDS
from hsdag_ray.cli import UsageError, read_yaml_mapping, run
from hsdag_ray.run.config import TrainConfig
from hsdag_ray.run.sweep_trials import SweepInterrupted
from hsdag_ray.run.sweeping import GUIDE_MODES, PRESETS, SWEEP_BACKEND, SweepConfig, run_sweep

__all__ = ["build_parser", "config_from_args", "main"]


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
