"""How close each method gets in its first measurements, on architectures and device sets
no setting was tuned on (issue 48's goal: within 1.01x of the optimum after 10).

    python bench/bench_first_ten.py --methods refit,anneal --seeds 0,1,2 --budget 30 \\
        --models tv:resnet34,tv:efficientnet_b1,tv:regnet_x_800mf,tv:vgg11,hf:roformer,hf:layoutlm

Each run goes through :func:`hsdag_ray.run.inprocess.run_method` (as ``train`` runs a method,
in this process, no Ray): the simulator measures with the model's recorded profile
(``bench_learning.py``'s, ``--profiles``), the method is given a variant of it with every
op time off by its own factor ``exp(SIGMA N(0, 1))`` (``--estimate``, seed 1000, as
``bench_learning.py --estimate`` and ``bench_refit.py``), and best/optimum divides by the
exact optimum of the costs measured (min cut on two devices, the MILP with the memory
limits beyond). Device sets: the CPU with each ``--accelerators`` entry (``A+B`` for
several). Prints every run, then a markdown table per case: the median best/optimum
after ``--at`` measurements over seeds (min-max), and the median measurements until the
best was within 1.01x (``>B`` where a run was not within ``--budget``). The single devices
a run measures before its method starts are measurements, as in ``train``'s
``curve.jsonl``.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np

from bench.bench_learning import jittered, load_or_record

TARGET = 1.01


def run_case(graph, truth, known, method: str, budget: int, seed: int) -> list[float]:
    """The best latency after every measurement of one run of ``method``."""
    from envs.simulator import SimulatorBackend
    from hsdag_ray.run.inprocess import run_method

    r = run_method(method, graph, SimulatorBackend(truth), known, budget=budget, seed=seed,
                   say=lambda _: None, progress=False)
    return [np.inf if row["best_latency_s"] is None else row["best_latency_s"]
            for row in r["best_curve"]]


def problems(models: str, accelerators: str, profiles: str, estimate: float):
    """Every problem of the bench: per model (comma-separated) and accelerator set
    (comma-separated, ``+`` between devices beside the CPU), ``(model, accelerators, devices,
    graph, machine, profile)``: the cost graphs of the recorded profile (the machine) and of
    a variant ``estimate`` off (the run's profile)."""
    from hsdag_core.coarsening import build_graph
    from hsdag_core.device_profile import Profile, cost_graph

    for model in models.split(","):
        truth = json.loads(load_or_record(model, Path(profiles)).read_text())
        known = jittered(truth, estimate, 1000)
        _, _, graph, _ = build_graph(model, "colocation")
        for acc in accelerators.split(","):
            devices = ["CPU", *acc.split("+")]
            yield (model, acc, devices, graph, cost_graph(graph, Profile.from_json(truth), devices),
                   cost_graph(graph, Profile.from_json(known), devices))


def to_target(curve: list[float], optimum: float) -> float:
    """Measurements until the best was within :data:`TARGET` of ``optimum`` (inf: never)."""
    return next((k for k, v in enumerate(curve, 1) if v <= TARGET * optimum), np.inf)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="tv:resnet34,tv:efficientnet_b1,tv:regnet_x_800mf,"
                    "tv:vgg11,hf:roformer,hf:layoutlm")
    ap.add_argument("--accelerators", default="GPU_SMALLMEM,GPU_SMALLMEM+NPU_MODEL,"
                    "GPU_SMALLMEM+GPU_TINYMEM+NPU_MODEL")
    ap.add_argument("--methods", default="refit,anneal")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--budget", type=int, default=30, help="measurements per run")
    ap.add_argument("--at", type=int, default=10, help="the measurement the table reads the best at")
    ap.add_argument("--estimate", type=float, default=0.5,
                    help="how far off the run's profile is (SIGMA of bench_learning.py)")
    ap.add_argument("--profiles", default="bench/.cache", help="folder of recorded profiles")
    ap.add_argument("--json", default="", help="write every run's curve here")
    ap.add_argument("--refit-plan-s", type=float, default=None,
                    help="refit's planning seconds per proposal where it solves the MILP "
                         "(default: policies.search.refit.PLAN_SECONDS, 1 s)")
    args = ap.parse_args()
    if args.refit_plan_s is not None:
        import policies.search.refit as refit

        refit.PLAN_SECONDS = args.refit_plan_s
    from envs.simulator import Simulator
    from policies.solvers.exact import exact_method, solve

    methods, seeds = args.methods.split(","), [int(s) for s in args.seeds.split(",")]
    rows: list[dict] = []
    for model, acc, devices, graph, cg_truth, cg_known in problems(
            args.models, args.accelerators, args.profiles, args.estimate):
        res = solve(cg_truth, "sequential", exact_method(cg_truth, "sequential"), time_limit=120)
        optimum = Simulator(cg_truth).sequential(np.asarray(res.placement)).value
        for method in methods:
            for seed in seeds:
                curve = run_case(graph, cg_truth, cg_known, method, args.budget, seed)
                at = curve[min(args.at, len(curve)) - 1] / optimum
                rows.append({"model": model, "devices": len(devices), "accelerator": acc,
                             "method": method, "seed": seed, "at": at,
                             "to_target": to_target(curve, optimum),
                             "final": curve[-1] / optimum, "proven": bool(res.optimal)})
                print(f"{model:18s} {acc:34s} {method:7s} seed {seed}: after {args.at} {at:.3f}, "
                      f"to {TARGET}x {rows[-1]['to_target']}, after {len(curve)} "
                      f"{rows[-1]['final']:.3f}", flush=True)
                if args.json:
                    Path(args.json).write_text(json.dumps(rows, default=float))
    print_table(rows, methods, args.at, args.budget)


def print_table(rows: list[dict], methods: list[str], at: int, budget: int) -> None:
    def cell(vals: list[float]) -> str:
        m = statistics.median(vals)
        return f"{m:.3f}" if min(vals) == max(vals) else f"{m:.3f} ({min(vals):.3f}-{max(vals):.3f})"

    def reach(vals: list[float]) -> str:
        m = statistics.median(vals)
        return f">{budget}" if not np.isfinite(m) else f"{m:.0f}"

    head = ["model", "devices"] + [f"{m} after {at}" for m in methods] + [f"{m} to {TARGET}x" for m in methods]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    cases = dict.fromkeys((r["model"], r["accelerator"]) for r in rows)
    for model, acc in cases:
        mine = [r for r in rows if (r["model"], r["accelerator"]) == (model, acc)]
        by = {m: [r for r in mine if r["method"] == m] for m in methods}
        star = "" if all(r["proven"] for r in mine) else " *"
        print(f"| {model} | {acc.replace('+', ', ')}{star} | "
              + " | ".join(cell([r["at"] for r in by[m]]) for m in methods) + " | "
              + " | ".join(reach([r["to_target"] for r in by[m]]) for m in methods) + " |")
    for m in methods:
        mine = [r for r in rows if r["method"] == m]
        print(f"{m}: within {TARGET}x after {at} in {sum(r['at'] <= TARGET for r in mine)} of "
              f"{len(mine)} runs; median best/optimum after {at} "
              f"{statistics.median(r['at'] for r in mine):.3f}")


if __name__ == "__main__":
    main()
