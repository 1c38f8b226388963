"""Solve time and objective value of every method on every dnn-partitioning input.

    python bench/bench_solvers.py                  # all 24 inputs, 60 s per MILP
    python bench/bench_solvers.py --quick          # layer graphs only, 10 s per MILP
    python bench/bench_solvers.py --match OperatorGraphs --methods dp,milp-contig

Inputs of ``throughput-inputs/`` are solved for the ``throughput`` objective
(DP, contiguous and non-contiguous MILP, baselines, and the human-expert split
of the layer graphs when there is one); inputs of ``latency-inputs/`` for
``sequential`` (MILP, alpha-expansion, baselines, and the two-device min cut on
CPU0 + ACC0) and ``parallel`` (HEFT and its lower bound). ``--methods`` takes
method names and ``human-expert``. Values are the simulator's, in ms;
the bound is each method's proven lower bound over its scope (``c`` marks
contiguous splits). The DP must finish each throughput OperatorGraphs
inference input within 60 s: the table flags any that does not.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from envs.simulator import Simulator
from hsdag_ray.dnnpart import load_dnnpart, load_expert_split
from hsdag_ray.solve import restrict_devices
from policies.exact import solve
from policies.result import SolveResult

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT.parent / "shared" / "benchmarks" / "dnn-partitioning"
PLAN = {"throughput": ["dp", "milp-contig", "milp", "single", "random"],
        "sequential": ["milp", "alpha-expansion", "mincut", "single", "random"],
        "parallel": ["heft", "single", "random"]}


def _ms(x: float) -> str:
    return f"{x * 1e3:10.3f}" if np.isfinite(x) else f"{'-':>10}"


def row(name: str, r: SolveResult) -> str:
    opt = ("yes" if r.optimal else "no") + ("c" if r.scope == "contiguous" else "")
    gap = f"{r.gap:7.2%}" if np.isfinite(r.gap) else f"{'-':>7}"
    return (f"{name:<44}{r.objective:<11}{r.method:<16}{_ms(r.value)} {_ms(r.bound)} {gap} "
            f"{opt:>5} {r.solve_s:8.2f}  {r.status[:60]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", type=Path, default=BENCH, help="benchmark folder")
    ap.add_argument("--quick", action="store_true",
                    help="layer graphs only, --time-limit 10")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="seconds per MILP / DP / search (default 60, 10 with --quick)")
    ap.add_argument("--match", default="", help="only inputs whose path contains this")
    ap.add_argument("--methods", default="", help="comma-separated subset of methods")
    ap.add_argument("--json", type=Path, help="also write every result to this JSON file")
    args = ap.parse_args()
    limit = args.time_limit or (10.0 if args.quick else 60.0)
    keep = set(filter(None, args.methods.split(",")))
    files = sorted(args.bench.glob("*-inputs/*/*.json"))
    if args.quick:
        files = [f for f in files if f.parent.name == "LayerGraphs"]
    files = [f for f in files if args.match in str(f)]
    if not files:
        raise SystemExit(f"no input under {args.bench} matches; pass --bench FOLDER")
    print(f"time limit {limit:g} s per method; values and bounds in ms\n")
    print(f"{'input':<44}{'objective':<11}{'method':<16}{'value':>10} {'bound':>10} {'gap':>7} "
          f"{'opt':>5} {'solve_s':>8}  status")
    out = []
    for f in files:
        g = load_dnnpart(f)
        name = f"{g.name} ({g.num_nodes}n,{g.num_devices}d)"
        objectives = ["throughput"] if f.parts[-3].startswith("throughput") else \
            ["sequential", "parallel"]
        for obj in objectives:
            for method in PLAN[obj]:
                if keep and method not in keep:
                    continue
                graph = g
                if method == "mincut":
                    graph = restrict_devices(g, [g.devices.index("CPU0"), g.devices.index("ACC0")])
                try:
                    r = solve(graph, obj, method, time_limit=limit)
                except (ValueError, TimeoutError) as e:
                    print(f"{name:<44}{obj:<11}{method:<16}{'skipped: ' + str(e)[:90]}", flush=True)
                    continue
                label = name if method != "mincut" else f"{g.name} (CPU0+ACC0)"
                print(row(label, r), flush=True)
                if method == "dp" and f.parent.name == "OperatorGraphs" and \
                        "inference" in f.name and r.solve_s > 60:
                    print(f"  !! the DP took {r.solve_s:.1f} s, over the 60 s target", flush=True)
                out.append({"input": g.name, **r.to_dict()})
            # the expert splits are of the layer graphs
            expert = args.bench / "human-experts" / f.name.replace(".json", "_expert.json")
            if obj == "throughput" and f.parent.name == "LayerGraphs" and expert.exists() \
                    and (not keep or "human-expert" in keep):
                t0 = time.perf_counter()
                p = load_expert_split(expert, g)
                res = Simulator(g).evaluate(p, obj)
                print(f"{name:<44}{obj:<11}{'human-expert':<16}{_ms(res.value)} {'':>10} "
                      f"{'':>7} {'':>5} {time.perf_counter() - t0:8.2f}  "
                      f"{'feasible' if res.feasible else res.violation}", flush=True)
                out.append({"input": g.name, "method": "human-expert", "objective": obj,
                            "value_s": res.value, "feasible": res.feasible})
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
