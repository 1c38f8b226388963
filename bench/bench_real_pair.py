"""Measurements and wall seconds to within 1% of the best re-measured placement, on real device pairs.

    python bench/bench_real_pair.py                       # both pairs, resnet50 + tv:mobilenet_v3_large
    python bench/bench_real_pair.py --pairs torch --models tiny_cnn --budget 10

For each device pair (``torch``: the torch backend on ``cpu`` + ``cpu:bf16``; ``openvino``:
OpenVINO's ``auto`` backend on ``CPU`` + ``CPU_F32``), each model, each method (refit, anneal,
hsdag, as published: no ``--guide`` unless ``--guide`` is given, which then applies to every
method alike) and each seed, ``python -m hsdag_ray.train`` runs as a subprocess with
command-line flags only, a budget in measurements. Every run gets the same profile of both
devices (refit reads it; the others read it as cost features), recorded with
``python -m hsdag_ray.profile`` into ``--profile-dir`` when it is not there yet.

Then, from the run folders alone: each run's final best placement (the method's own
placement that its summary re-measured fastest, ``store.json``'s ``top`` as the summary's
``method#i``) is re-measured next to every other run's of the same pair and model, and next
to each device alone, in interleaved rounds (:func:`envs.measuring_service.remeasure`: round ``r``
times every placement once, in an order rotated from round to round, so drifts of a shared
machine hit all alike), with racing off and ``--block`` runs per timed block. The fastest
method placement is the reference. From each run's ``curve.jsonl`` (its measured best after
every measurement, with the seconds since the run started), the bench reads the
measurements and the wall seconds until that measured best was within ``--within`` (1.01x)
of the reference: wall seconds count from the run's start, so they include starting Ray,
the baselines and every proposal's planning and solver time. A measured best is one raced
timing, biased low next to a re-measured median, so the bench also says whether each run's
re-measured final best is faster than the reference, slower, or within the noise (their 95%
intervals overlap, :func:`envs.intervals.compare`).

Prints a Markdown table per pair and model. Imports OpenVINO only for the ``openvino`` pair.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from envs.base import TimingConfig
from envs.intervals import compare, interval_ms
from envs.measuring_service import remeasure

#: pair name -> (train's --backend, its devices)
PAIRS = {"torch": ("torch", ("cpu", "cpu:bf16")), "openvino": ("auto", ("CPU", "CPU_F32"))}
METHODS = ("refit", "anneal", "hsdag")
#: the candidate-name prefix the run's summary gives its own placements (hsdag_ray.run.summary)
METHOD_CANDIDATE = "method#"

Runner = Callable[[list[str]], int]


def slug(model: str) -> str:
    """A file-name-safe form of a model name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", model)


def train_argv(backend: str, devices: Sequence[str], model: str, method: str, seed: int,
               budget: int, out: Path, name: str, profile: Optional[Path], threads: int,
               guide: bool = False, extra: Sequence[str] = ()) -> list[str]:
    """The flags of one ``python -m hsdag_ray.train`` run."""
    argv = ["--backend", backend, "--devices", ",".join(devices), "--model", model,
            "--method", method, "--seed", str(seed), "--budget", str(budget),
            "--budget-unit", "measurements", "--wandb", "disabled", "--out", str(out),
            "--name", name, "--threads", str(threads), "--guide" if guide else "--no-guide"]
    if profile is not None:
        argv += ["--profile", str(profile)]
    return argv + list(extra)


def subprocess_runner(log: Path) -> Runner:
    """Run ``python -m hsdag_ray.train ARGV`` as a subprocess, its output appended to ``log``."""
    def run(argv: list[str]) -> int:
        with open(log, "a") as f:
            f.write(f"$ python -m hsdag_ray.train {' '.join(argv)}\n")
            f.flush()
            return subprocess.run([sys.executable, "-m", "hsdag_ray.train", *argv],
                                  stdout=f, stderr=subprocess.STDOUT).returncode
    return run


def record_profile(backend: str, devices: Sequence[str], model: str, path: Path, threads: int,
                   log: Path) -> None:
    """Record ``model``'s profile of ``devices`` with ``python -m hsdag_ray.profile``."""
    argv = [sys.executable, "-m", "hsdag_ray.profile", "--model", model, "--devices", ",".join(devices),
            "--backend", "torch" if backend == "torch" else "auto", "--threads", str(threads),
            "--out", str(path)]
    with open(log, "a") as f:
        f.write(f"$ {' '.join(argv[1:])}\n")
        f.flush()
        rc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc != 0 or not path.is_file():
        raise RuntimeError(f"recording the profile {path} failed (exit {rc}); see {log}")


@dataclass
class Run:
    """What one run folder says: its settings, curve, final best placement and wall time."""
    folder: Path
    method: str
    seed: int
    guide: bool
    measurements: int
    wall_s: float
    curve: list[dict]
    placement: list[int]
    final_s: float  # the run's own re-measured figure of ``placement``
    incumbents: list[tuple[int, list[int]]]  # (measurement, placement) at each new measured best


def read_run(folder: Path) -> Run:
    """Read a finished run folder (config.json, curve.jsonl, summary.json, store.json)."""
    cfg = json.loads((folder / "config.json").read_text())["train"]["run"]
    summary = json.loads((folder / "summary.json").read_text())
    store = json.loads((folder / "store.json").read_text())
    curve = [json.loads(line) for line in (folder / "curve.jsonl").read_text().splitlines() if line.strip()]
    top = store.get("top") or []
    cands = (summary.get("remeasured") or {}).get("candidates") or {}
    own = [(c["latency_s"], i) for i in range(len(top))
           if (c := cands.get(f"{METHOD_CANDIDATE}{i + 1}")) and c.get("ok")]
    if own:
        final_s, i = min(own)
        placement = top[i]["placement"]
    elif store.get("best"):
        final_s, placement = float(store["best"]["latency_s"]), store["best"]["placement"]
    else:
        raise RuntimeError(f"{folder} has no measured placement of the method")
    # store.json's log holds every measurement in curve.jsonl's order, with its placement
    log = store.get("log") or []
    incumbents, best = [], math.inf
    for row, entry in zip(curve, log):
        if row["best_latency_s"] is not None and row["best_latency_s"] < best:
            best = row["best_latency_s"]
            incumbents.append((int(row["measurement"]), [int(d) for d in entry["placement"]]))
    return Run(folder, cfg["method"], int(cfg["seed"]), bool(cfg["guide"]), int(summary["measurements"]),
               float(summary["wall_s"]), curve, [int(d) for d in placement], float(final_s), incumbents)


def run_backend(folder: Path, block: int):
    """The backend a run measured on, rebuilt from its config.json (same graph, devices and
    timing; racing off, ``block`` runs per timed block): ``(backend, devices)``."""
    from envs.backends import graph_source
    from envs.graph_backend import make_backend
    from hsdag_core.compgraph import parse_input_shapes
    from hsdag_core.device_profile import Profile

    cfg = json.loads((folder / "config.json").read_text())
    run, env = cfg["train"]["run"], cfg["train"]["env"]
    known = {f.name for f in dataclasses.fields(TimingConfig)}
    timing = TimingConfig(**{**{k: v for k, v in cfg["train"]["timing"].items() if k in known},
                             "race": False, "block": block})
    profile = Profile.load(env["profile"]) if env.get("profile") else None
    source = graph_source(env["backend"], profile.source if profile else "")
    model, _, graph, _ = source.build(run["model"], env["coarsen"],
                                      parse_input_shapes(run.get("input_shape", "")))
    devices = list(env["devices"]) or (profile.device_names if profile else [])
    backend = make_backend(env["backend"], graph, model, devices, timing, profile, env["objective"])
    return backend, list(backend.devices)


def first_within(curve: list[dict], bound_s: float) -> tuple[Optional[int], Optional[float]]:
    """The measurement count and the run's wall seconds when its measured best first was at
    most ``bound_s`` (``(None, None)``: never within the run)."""
    for row in curve:
        if row["best_latency_s"] is not None and row["best_latency_s"] <= bound_s:
            return int(row["measurement"]), float(row["wall_s"])
    return None, None


def _wall_at(run: Run, measurement: Optional[int]) -> Optional[float]:
    return None if measurement is None else float(run.curve[measurement - 1]["wall_s"])


def figures(runs: list[Run], measured: dict[str, dict], within: float) -> dict:
    """The reference (the fastest re-measured placement of any run: a final best or a best
    so far) and one row per run: the measurements and wall seconds until its measured best
    (the curve) was within ``within`` of the reference, and until the re-measured figure of
    its best so far was (within ``within``; within the noise, the intervals overlapping)."""
    ok = {k: r for k, r in measured.items() if r["ok"] and k.startswith("run ")}
    if not ok:
        raise RuntimeError("no method placement could be re-measured")
    ref_name = min(ok, key=lambda k: ok[k]["latency_s"])
    ref = ok[ref_name]
    bound = within * ref["latency_s"]
    rows = []
    for i, run in enumerate(runs):
        r = measured[f"run {i}"]
        n, wall = first_within(run.curve, bound)
        close = noise = None
        for m, _ in run.incumbents:
            inc = measured[f"run {i} @{m}"]
            if not inc["ok"]:
                continue
            if close is None and inc["latency_s"] <= bound:
                close = m
            if noise is None and (f"run {i} @{m}" == ref_name or
                                  compare(inc.get("interval_s"), ref["interval_s"]) != "slower"):
                noise = m
        rows.append({
            "method": run.method, "seed": run.seed, "guide": run.guide,
            "measurements": run.measurements, "wall_s": run.wall_s,
            "first_measurement_s": run.curve[0]["wall_s"] if run.curve else None,
            "to_within": n, "wall_to_within_s": wall,
            "re_to_within": close, "re_wall_to_within_s": _wall_at(run, close),
            "re_to_noise": noise, "re_wall_to_noise_s": _wall_at(run, noise),
            "incumbents": len(run.incumbents),
            "final_s": r["latency_s"] if r["ok"] else math.inf,
            "final_interval_s": r.get("interval_s"),
            "ratio": (r["latency_s"] / ref["latency_s"]) if r["ok"] else math.inf,
            "vs_reference": ("reference" if measured[ref_name] is r else
                             compare(r.get("interval_s"), ref["interval_s"]) if r["ok"] else "failed"),
            "folder": str(run.folder)})
    singles = {k: v for k, v in measured.items() if not k.startswith("run ")}
    return {"reference": ref_name, "reference_s": ref["latency_s"], "reference_interval_s": ref["interval_s"],
            "reference_half_width": ref["half_width"], "singles": singles, "rows": rows}


def analyse(folders: Sequence[Path], rounds: int, block: int, within: float = 1.01) -> dict:
    """Re-measure, for the runs in ``folders`` (one pair, one model), each run's final best
    placement and every best so far of its curve, with each device alone, in interleaved
    rounds; read each run's curve against the fastest (:func:`figures`)."""
    runs = [read_run(Path(f)) for f in folders]
    backend, devices = run_backend(runs[0].folder, block)
    n = len(runs[0].placement)
    cands: dict[str, list[int]] = {}
    for i, r in enumerate(runs):
        cands[f"run {i}"] = r.placement
        cands.update({f"run {i} @{m}": p for m, p in r.incumbents})
    cands.update({f"all {d}": [j] * n for j, d in enumerate(devices)})
    # identical placements are timed once and share their figures
    unique: dict[tuple, str] = {}
    for name, p in cands.items():
        unique.setdefault(tuple(p), name)
    t0 = time.perf_counter()
    out = remeasure(lambda p: backend.measure_array(np.asarray(p, dtype=np.int64)).to_dict(),
                    {name: list(p) for p, name in unique.items()}, rounds=rounds)
    measured = {name: out[unique[tuple(p)]] for name, p in cands.items()}
    result = figures(runs, measured, within)
    result.update(devices=devices, rounds=rounds, block=block, within=within, placements=len(unique),
                  remeasure_s=time.perf_counter() - t0)
    return result


def _num(x, fmt: str) -> str:
    return "never" if x is None else format(x, fmt)


def table(result: dict) -> str:
    """A Markdown table of :func:`analyse`'s result, one row per run, then each device alone."""
    w = result["within"]
    lines = [f"| method | `--guide` | seed | measured | wall s | 1st measurement at s "
             f"| to {w:g}x: measured best | to {w:g}x: re-measured best so far | to within the noise "
             f"| final best re-measured (ms) | / reference | vs reference |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def at(m, wall) -> str:
        return "never" if m is None else f"{m} ({wall:.0f} s)"

    for r in result["rows"]:
        final = (f"{r['final_s'] * 1e3:.2f} [{interval_ms(r['final_interval_s'], 2)}]"
                 if math.isfinite(r["final_s"]) else "failed")
        lines.append(f"| {r['method']} | {'yes' if r['guide'] else 'no'} | {r['seed']} | {r['measurements']} "
                     f"| {r['wall_s']:.0f} | {_num(r['first_measurement_s'], '.0f')} "
                     f"| {at(r['to_within'], r['wall_to_within_s'])} "
                     f"| {at(r['re_to_within'], r['re_wall_to_within_s'])} "
                     f"| {at(r['re_to_noise'], r['re_wall_to_noise_s'])} "
                     f"| {final} | {r['ratio']:.3f} | {r['vs_reference']} |")
    for name, m in result["singles"].items():
        cell = (f"{m['latency_s'] * 1e3:.2f} [{interval_ms(m['interval_s'], 2)}] | "
                f"{m['latency_s'] / result['reference_s']:.3f} | "
                f"{compare(m['interval_s'], result['reference_interval_s'])}") if m["ok"] else "failed | |"
        lines.append(f"| {name} | | | | | | | | | {cell} |")
    return "\n".join(lines)


def run_pair(pair: str, model: str, methods: Sequence[str], seeds: Sequence[int], budget: int,
             out: Path, profile: Optional[Path], threads: int, runner: Runner, guide: bool = False,
             extra: Sequence[str] = (), devices: Optional[Sequence[str]] = None,
             backend: Optional[str] = None, reuse: bool = False) -> list[Path]:
    """Train every method and seed on one pair and model; return the finished run folders
    (``reuse``: a run whose folder already holds a summary is read, not trained again)."""
    be, devs = PAIRS[pair] if pair in PAIRS else (backend, devices)
    be, devs = backend or be, list(devices or devs)
    folders = []
    for method in methods:
        for seed in seeds:
            name = f"{pair}-{slug(model)}-{method}{'-guide' if guide else ''}-s{seed}"
            if reuse and (out / name / "summary.json").is_file():
                folders.append(out / name)  # finished before: read, not trained again
                continue
            argv = train_argv(be, devs, model, method, seed, budget, out, name, profile, threads, guide, extra)
            rc = runner(argv)
            if rc != 0 or not (out / name / "summary.json").is_file():
                print(f"{name}: train exited {rc}; left out", file=sys.stderr)
                continue
            folders.append(out / name)
    return folders


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", default="torch,openvino", help="torch, openvino or both (comma-separated)")
    ap.add_argument("--models", default="resnet50,tv:mobilenet_v3_large")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--budget", type=int, default=20, help="measurements per run")
    ap.add_argument("--guide", action="store_true", help="the search aids, for every method alike")
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads per device")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved re-measurement rounds")
    ap.add_argument("--block", type=int, default=5, help="runs per timed block when re-measuring")
    ap.add_argument("--within", type=float, default=1.01)
    ap.add_argument("--out", default="runs/real-pair", help="folder of the run folders and profiles")
    ap.add_argument("--reuse", action="store_true",
                    help="read runs whose folder under --out already holds a summary instead of training them "
                         "again (add seeds to an earlier bench; all are re-measured together)")
    ap.add_argument("--extra", default="", help="more train flags, space-separated (e.g. --remeasure-rounds 3)")
    args = ap.parse_args(argv)
    pairs = [p for p in args.pairs.split(",") if p]
    unknown = [p for p in pairs if p not in PAIRS]
    if unknown:
        ap.error(f"--pairs takes {' and '.join(PAIRS)}, not {', '.join(unknown)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "train.log"
    runner = subprocess_runner(log)
    seeds = [int(s) for s in args.seeds.split(",") if s]
    print(f"load before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} "
          f"on {os.cpu_count()} cores; run output in {log}")
    results = {}
    for pair in pairs:
        backend, devices = PAIRS[pair]
        for model in (m for m in args.models.split(",") if m):
            profile = out / f"profile-{pair}-{slug(model)}.json"
            if not profile.is_file():
                record_profile(backend, devices, model, profile, args.threads, log)
            t0 = time.perf_counter()
            folders = run_pair(pair, model, args.methods.split(","), seeds, args.budget, out, profile,
                               args.threads, runner, args.guide, args.extra.split(), reuse=args.reuse)
            train_s = time.perf_counter() - t0
            if not folders:
                print(f"## {model} on {pair}: no run finished")
                continue
            res = analyse(folders, args.rounds, args.block, args.within)
            results[f"{pair}/{model}"] = res
            load = os.getloadavg()
            print(f"\n## {model} on {pair} ({', '.join(res['devices'])}): runs {train_s:.0f} s, "
                  f"re-measured in {args.rounds} rounds of blocks of {args.block} in {res['remeasure_s']:.0f} s; "
                  f"reference {res['reference_s'] * 1e3:.2f} ms [{interval_ms(res['reference_interval_s'])}] "
                  f"(half-width {res['reference_half_width']:.1%}); load {load[0]:.2f} {load[1]:.2f}\n")
            print(table(res), flush=True)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
