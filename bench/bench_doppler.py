"""DOPPLER's compute graphs in DOPPLER's simulator: every method against its critical path.

    python bench/bench_doppler.py --budgets 100,1000 --seeds 0 --exact-time 60
    python bench/bench_doppler.py --methods gdp,placeto --budgets 100 --json b.json
    python bench/bench_doppler.py --merge a.json,b.json

On each of DOPPLER's six usable graphs (``--folder``: the four ``gdp_`` copies on 4 GPUs and
the two ``8gpu_*`` on 8; :mod:`hsdag_core.doppler`), the ``parallel`` objective in DOPPLER's
event order (:mod:`envs.doppler_order`), which equals DOPPLER's own simulator. Each method
of ``--methods`` runs in this process (:func:`hsdag_ray.run.inprocess.run_method`, measured by
the simulator, the graph's own costs as its profile, as published: no search aids) for the
largest budget of ``--budgets``, GDP, Placeto and the RNN placer through ``train --model
doppler:FILE`` (the same simulator, the budget in measurements, run folders under
``--runs``); the table reads each run's best after every budget.
``exact`` is CP-SAT (``solve --method exact``, ``--exact-time`` seconds, its placement
measured once). The references: DOPPLER's critical path, best of ``--episodes`` episodes
in its intended and its coded version (:mod:`policies.solvers.critical_path`), and a lower
bound (the larger of :func:`policies.solvers.bounds.lower_bound`, total work / devices or
each node's head plus tail, and CP-SAT's bound). Prints one row per graph and budget (values in DOPPLER's units, its
simulator's seconds; the median over the seeds, their number in brackets where more
than one), the best method over the critical path's best, and writes every figure to
``--json``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

DEFAULT_FOLDER = Path(__file__).resolve().parents[2] / "shared" / "benchmarks" / "doppler"
GRAPHS = ("gdp_chain_mm_112nodes,gdp_ffnn_192nodes,gdp_transformer_block_215nodes,"
          "gdp_full_transformer_layer_261nodes,8gpu_transformer_block,8gpu_full_transformer")


def run_learned(method: str, graph, costs, budget: int, seed: int) -> list[float]:
    """The best value after every measurement of one in-process run."""
    from envs.simulator import SimulatorBackend
    from hsdag_ray.run.inprocess import run_method

    r = run_method(method, graph, SimulatorBackend(costs, "parallel"), costs, budget=budget,
                   seed=seed, objective="parallel", say=lambda _: None, progress=False)
    return [np.inf if row["best_latency_s"] is None else row["best_latency_s"]
            for row in r["best_curve"]]


#: methods trained through ``python -m hsdag_ray.train`` (RLlib), on ``--model doppler:FILE``
TRAINED = ("gdp", "placeto", "rnn")


def run_trained(method: str, path: Path, budget: int, seed: int, out: Path) -> list[float]:
    """The best value after every measurement of one ``train`` run on ``doppler:path``
    (the simulator, the parallel objective, the budget in measurements; its curve.jsonl)."""
    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.training import train

    name = f"{path.stem}-{method}-{seed}"
    cfg = TrainConfig.of(model=f"doppler:{path}", method=method, backend="simulator",
                         objective="parallel", budget=budget, budget_unit="measurements",
                         env_runners=0, wandb="disabled", out=str(out), name=name, seed=seed)
    train(cfg, quiet=True)
    rows = [json.loads(line) for line in (out / name / "curve.jsonl").read_text().splitlines() if line]
    return [np.inf if r["best_latency_s"] is None else r["best_latency_s"] for r in rows]


def start_ray() -> None:
    """A loopback-only local Ray with one measuring slot, as the tests share one."""
    import os

    from hsdag_ray.run.config import MEASURE_RESOURCE
    from hsdag_ray.run.local_ray import start_local_ray

    start_local_ray(include_dashboard=False, log_to_driver=False, configure_logging=False,
                    resources={MEASURE_RESOURCE: 1},
                    runtime_env={"env_vars": {"OMP_NUM_THREADS": "1",
                                              "WANDB_MODE": os.environ.get("WANDB_MODE", "disabled")}})


def at(curve: list[float], budget: int) -> float:
    return curve[min(budget, len(curve)) - 1] if curve else np.inf


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--folder", type=Path, default=DEFAULT_FOLDER, help="DOPPLER's compute_graph files")
    ap.add_argument("--graphs", default=GRAPHS)
    ap.add_argument("--methods", default="random,anneal,hsdag,heft,m-etf,exact")
    ap.add_argument("--budgets", default="100,1000")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--episodes", type=int, default=50, help="critical-path episodes")
    ap.add_argument("--exact-time", type=float, default=60.0, help="CP-SAT seconds")
    ap.add_argument("--json", default="", help="write every figure here")
    ap.add_argument("--runs", type=Path, default=Path("runs/bench_doppler"),
                    help="run folders of the methods trained through train (gdp, placeto, rnn)")
    ap.add_argument("--merge", default="",
                    help="A.json,B.json: print the table of earlier --json files together instead "
                         "of running (methods run in separate processes)")
    args = ap.parse_args()
    if args.merge:
        rows = merge([json.loads(Path(f).read_text()) for f in args.merge.split(",")])
        methods = list(dict.fromkeys(m for r in rows for m in r["methods"]))
        budgets = sorted({int(b) for r in rows for m in r["methods"].values() for b in m})
        print_table(rows, methods, budgets)
        return
    from envs.simulator import Simulator
    from hsdag_core.doppler import doppler_compgraph, load_doppler
    from policies.solvers.bounds import lower_bound
    from policies.solvers.critical_path import solve_critical_path
    from policies.solvers.exact import solve

    budgets = sorted(int(b) for b in args.budgets.split(","))
    seeds = [int(s) for s in args.seeds.split(",")]
    methods = args.methods.split(",")
    if set(methods) & set(TRAINED):  # one local Ray for every train run (each joins it)
        start_ray()
    rows = []
    for name in args.graphs.split(","):
        costs = load_doppler(args.folder / f"{name}.txt")
        graph = doppler_compgraph(costs)
        sim = Simulator(costs)
        row = {"graph": name, "nodes": costs.num_nodes, "devices": costs.num_devices, "methods": {},
               "seeds": {}}
        for version in ("intended", "coded"):
            r = solve_critical_path(costs, "parallel", episodes=args.episodes, version=version)
            row[f"cp_{version}"] = r.value
        bound = lower_bound(costs, "parallel")
        for method in methods:
            t0 = time.perf_counter()
            if method == "exact":
                r = solve(costs, "parallel", "exact", time_limit=args.exact_time)
                value = sim.evaluate(r.placement, "parallel").value
                bound = max(bound, r.bound)
                row["exact_info"] = {"bound": r.bound, "gap": r.gap, "optimal": r.optimal,
                                     "status": r.status, "solve_s": r.solve_s}
                row["methods"][method] = {str(b): [value] for b in budgets}
            elif method in TRAINED:
                curves = [run_trained(method, args.folder / f"{name}.txt", budgets[-1], s, args.runs)
                          for s in seeds]
                row["methods"][method] = {str(b): [at(c, b) for c in curves] for b in budgets}
            else:
                curves = [run_learned(method, graph, costs, budgets[-1], s) for s in seeds]
                row["methods"][method] = {str(b): [at(c, b) for c in curves] for b in budgets}
            row["seeds"][method] = [0] if method == "exact" else seeds
            print(f"{name} {method}: " + ", ".join(
                f"{b}: {statistics.median(row['methods'][method][str(b)]):.4f}" for b in budgets)
                + f" ({time.perf_counter() - t0:.0f} s)", flush=True)
        row["bound"] = bound
        rows.append(row)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, default=float))
    print_table(rows, methods, budgets)


def merge(runs: list[list[dict]]) -> list[dict]:
    """One row per graph with the methods of every run (the first run's references; the
    largest of their bounds); a method's runs with other seeds join its values (a file
    without ``seeds`` ran seed 0)."""
    by: dict[str, dict] = {}
    for rows in runs:
        for r in rows:
            seeds = r.get("seeds") or {m: [0] for m in r["methods"]}
            if r["graph"] not in by:
                by[r["graph"]] = dict(r, methods={}, seeds={})
            row = by[r["graph"]]
            row["bound"] = max(row["bound"], r["bound"])
            for m, by_budget in r["methods"].items():
                have = row["seeds"].setdefault(m, [])
                new = [k for k, s in enumerate(seeds[m]) if s not in have]
                if m == "exact" and have:
                    continue  # one placement, the same at every seed
                have += [seeds[m][k] for k in new]
                for b, vals in by_budget.items():
                    row["methods"].setdefault(m, {}).setdefault(b, []).extend(vals[k] for k in new)
    return list(by.values())


def print_table(rows: list[dict], methods: list[str], budgets: list[int]) -> None:
    head = (["graph", "GPUs", "budget"] + methods
            + ["CP intended (best of 50)", "CP coded (best of 50)", "lower bound", "best / CP best"])
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    ratios = {b: [] for b in budgets}
    for row in rows:
        cp = min(row["cp_intended"], row["cp_coded"])
        for b in budgets:
            vals = {m: statistics.median(row["methods"][m][str(b)]) for m in methods
                    if str(b) in row["methods"].get(m, {})}
            best = min(vals.values())
            ratios[b].append(best / cp)
            runs = {m: len(row["methods"][m][str(b)]) for m in vals}
            cells = ["-" if m not in vals else (f"**{vals[m]:.2f}**" if vals[m] == best
                     else f"{vals[m]:.2f}") + (f" ({runs[m]})" if runs[m] > 1 else "")
                     for m in methods]
            print(f"| {row['graph']} | {row['devices']} | {b} | " + " | ".join(cells)
                  + f" | {row['cp_intended']:.2f} | {row['cp_coded']:.2f} | {row['bound']:.2f} "
                  f"| {best / cp:.3f} |")
    for b in budgets:
        r = ratios[b]
        print(f"budget {b}: best / CP best mean {statistics.mean(r):.3f}, worst {max(r):.3f}")


if __name__ == "__main__":
    main()
