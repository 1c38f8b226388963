"""The profile refit (``--method refit``) alone, on profiles that are wrong by a known amount.

    python bench/bench_refit.py --estimate 0.5 --jitter 0.3:1 --profiles prof/
    python bench/bench_refit.py --models hf:gpt2 --accelerators GPU_SMALLMEM --seeds 0 --noise 0.02
    python bench/bench_refit.py --models tv:swin_t --accelerators GPU_SMALLMEM --objective throughput
    python bench/bench_refit.py --models resnet50,hf:distilbert --seeds 0 --budgets 50,100 --singles \
        --accelerators GPU_SMALLMEM+NPU_MODEL,GPU_SMALLMEM+GPU_TINYMEM+NPU_MODEL   # 3 and 4 devices

The same setting as ``bench_learning.py --estimate SIGMA``: the simulator
measures with each model's recorded (optionally ``--jitter``-ed) profile, the
search is given a variant of it with every op time off by its own factor
``exp(SIGMA * N(0, 1))`` (seed 1000, as there), and best/optimum is over the
optimum of the costs measured. The search runs in this process against the
simulator, with no Ray and no run folder, so the whole grid takes minutes;
a ``train`` run also tells the search each single device's measurement before
it starts, and ``--singles`` does so too.
``--noise R`` multiplies every measurement by ``1 + R N(0, 1)``; the best is
then the placement measured fastest and its ratio is that of its true cost,
as a machine's winner's curse would give. Prints best/optimum at each of
``--budgets`` per run with the run's wall time and the seconds each proposal took to
plan (median and largest), and the runs within 1.01x at each budget.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from bench.bench_learning import jittered, load_or_record


def run_case(truth, known, budget: int, seed: int, budgets: list[int], noise: float,
             objective: str = "sequential", singles: bool = False,
             time_limit: float | None = None) -> dict:
    """One search: best/optimum of the true costs at each budget and the seconds each
    proposal took to plan; ``singles``: told each single device's measurement first, as a
    ``train`` run tells it; ``time_limit``: the search's seconds per exact solve (None:
    its default)."""
    from envs.simulator import Simulator
    from policies.solvers.exact import exact_method, solve
    from policies.search.refit import ProfileThompson

    machine = Simulator(truth)
    optimum = machine.evaluate(np.asarray(solve(truth, objective, exact_method(
        truth, objective), time_limit=120).placement), objective).value
    extra = {} if time_limit is None else {"time_limit": time_limit}
    search = ProfileThompson(truth.num_nodes, truth.num_devices, budget, seed=seed, costs=known,
                             objective=objective, **extra)
    rng = np.random.default_rng(seed + 7)
    for d in range(truth.num_devices) if singles else ():
        p = np.full(truth.num_nodes, d, dtype=np.int64)
        if machine.check(p) is None:  # a run measures the repair of one over memory
            search.observe(p, machine.evaluate(p, objective).value, proposed=False)
    best_measured, best_true, curve, planning = np.inf, np.inf, {}, []
    t0 = time.time()
    for k in range(1, budget + 1):
        t_plan = time.perf_counter()
        p = search.propose()
        planning.append(time.perf_counter() - t_plan)
        true = np.inf if machine.check(p) else machine.evaluate(p, objective).value
        measured = true * (1 + noise * rng.standard_normal())
        search.observe(p, measured)
        if measured < best_measured:
            best_measured, best_true = measured, true
        if k in budgets:
            curve[k] = best_true / optimum
    return {"curve": curve, "proposals": dict(search.proposals), "seconds": time.time() - t0,
            "noise_level": search.noise_level(), "planning_s": planning}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="resnet50,inception_v3,bert_base,hf:distilbert,hf:gpt2,"
                    "tv:vit_b_16,tv:swin_t,tv:resnext50_32x4d,tv:efficientnet_v2_s,hf:roberta,"
                    "hf:bart,tv:mobilenet_v3_small,tv:regnet_y_400mf")
    ap.add_argument("--accelerators", default="GPU_SMALLMEM,GPU_MODEL",
                    help="accelerators beside the CPU, one run each; A+B for several at once")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="seconds per exact solve of the search (default: the search's own)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--budgets", default="1,10,50,100,200")
    ap.add_argument("--estimate", type=float, default=0.5,
                    help="how far off the search's profile is (SIGMA of bench_learning.py)")
    ap.add_argument("--jitter", default="", help="SIGMA:SEED, as bench_learning.py's")
    ap.add_argument("--noise", type=float, default=0.0, help="relative noise of each measurement")
    ap.add_argument("--profiles", default="bench/.cache", help="folder of recorded profiles (bench_solvers.py's)")
    ap.add_argument("--objective", default="sequential", choices=("sequential", "throughput"),
                    help="what is measured and refitted (the objectives refit models)")
    ap.add_argument("--singles", action="store_true",
                    help="tell the search each single device's measurement first, as a run does")
    ap.add_argument("--json", default="", help="write every run's curve here")
    args = ap.parse_args()
    from hsdag_core.coarsening import build_graph
    from hsdag_core.device_profile import Profile, cost_graph

    budgets = [int(b) for b in args.budgets.split(",")]
    folder = Path(args.profiles)
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for model in args.models.split(","):
        truth = json.loads(load_or_record(model, folder, args.jitter).read_text())
        known = jittered(truth, args.estimate, 1000)
        _, _, graph, _ = build_graph(model, "colocation")
        for acc in args.accelerators.split(","):
            devices = ["CPU", *acc.split("+")]
            cg_truth = cost_graph(graph, Profile.from_json(truth), devices)
            cg_known = cost_graph(graph, Profile.from_json(known), devices)
            for seed in (int(s) for s in args.seeds.split(",")):
                r = run_case(cg_truth, cg_known, max(budgets), seed, budgets, args.noise,
                             args.objective, args.singles, args.time_limit)
                rows.append({"model": model, "accelerator": acc, "seed": seed, **r})
                plan = np.asarray(r["planning_s"])
                print(f"{model:22s} {acc:13s} seed {seed}: "
                      + " ".join(f"{b}: {v:.4f}" for b, v in r["curve"].items())
                      + f"  ({r['seconds']:.0f} s; planning per proposal median "
                      f"{np.median(plan):.3f} s, max {plan.max():.3f} s)", flush=True)
                if args.json:
                    Path(args.json).write_text(json.dumps(rows))
    for b in budgets:
        within = sum(r["curve"][b] <= 1.01 for r in rows)
        print(f"within 1.01x at {b} measurements: {within} of {len(rows)} runs")


if __name__ == "__main__":
    main()
