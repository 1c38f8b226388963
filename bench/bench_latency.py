"""The dnn-partitioning latency inputs in Tarnawski et al.'s latency model, and under the
sequential objective: value, bound, gap, proof and seconds of the exact solvers.

    python bench/bench_latency.py                       # both tables, 60 s per exact solve
    python bench/bench_latency.py --time-limit 10 --match LayerGraphs
    python bench/bench_latency.py --objectives latency

``latency`` (:mod:`envs.call_latency`): for every input of ``latency-inputs/``, the
authors' greedy as they report it (``greedy.cpp``; figures of the issue that asked for
this model, printed by their tool) and as ported here (``latency-greedy``, whose
topological order may differ from theirs), all on one CPU, the human-expert split of
the layer graphs (scored and flagged where it breaks the input's memory or accelerator
count), the ``--method exact``: the latency IP, whose start is the heuristic (``latency-search``,
given 20% of the time limit, both within it): value, bound, gap, proven, seconds.
``sequential``: ``--method exact`` (the sequential MILP) with its start. Values in ms.
The machine's load (``uptime``) is printed before and after.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

from envs.simulator import Simulator
from hsdag_core.dnnpart import load_dnnpart, load_expert_split, split_accelerators
from policies.solvers.exact import solve

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT.parent / "shared" / "benchmarks" / "dnn-partitioning"
#: ``greedy.cpp`` of the authors' repository on each input, ms (as the issue reports it)
AUTHORS_GREEDY = {"LayerGraphs/bert24": 100.22, "LayerGraphs/gnmt": 268.50,
                  "LayerGraphs/inceptionv3": 2485.24, "LayerGraphs/resnet50": 4197.06,
                  "OperatorGraphs/bert_l-3": 416.20, "OperatorGraphs/bert_l-6": 494.14,
                  "OperatorGraphs/bert_l-12": 867.84, "OperatorGraphs/resnet50": 839.54}


def _ms(x: float) -> str:
    return f"{x * 1e3:,.2f}" if np.isfinite(x) else "-"


def _load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _expert(f: Path, bench: Path) -> str:
    split = bench / "human-experts" / f.name.replace(".json", "_expert.json")
    if f.parent.name != "LayerGraphs" or not split.exists():     # the experts split layer graphs
        return "-"
    used = split_accelerators(json.loads(split.read_text()))
    g = load_dnnpart(f)
    have = sum(d.startswith("ACC") for d in g.devices)
    if used > have:
        g = load_dnnpart(f, extra_accs=used - have)
    res = Simulator(g).evaluate(load_expert_split(split, g), "latency")
    flag = "" if res.feasible and used <= have else (
        f" ({used} accs > {have})" if used > have else " (over memory)")
    return _ms(res.value) + flag


def latency_table(files: list[Path], bench: Path, limit: float) -> None:
    print("| input | nodes | accs | authors' greedy | greedy (port) | all-CPU | human expert | "
          "heuristic | exact value | bound | gap | proven | seconds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for f in files:
        g = load_dnnpart(f)
        key = f"{f.parent.name}/{f.stem.removesuffix('_inference')}"
        greedy = solve(g, "latency", "latency-greedy")
        cpu = Simulator(g).evaluate(g.single_device("CPU0"), "latency").value
        r = solve(g, "latency", "exact", time_limit=limit)
        accs = sum(d.startswith("ACC") for d in g.devices)
        print(f"| {key} | {g.num_nodes} | {accs} | {AUTHORS_GREEDY.get(key, float('nan')):,.2f} | "
              f"{_ms(greedy.value)} | {_ms(cpu)} | {_expert(f, bench)} | {_ms(r.info.get('start_s', np.nan))} | "
              f"{_ms(r.value)} | {_ms(r.bound)} | {r.gap:.1%} | {'yes' if r.optimal else 'no'} | "
              f"{r.solve_s:.0f} |", flush=True)


def sequential_table(files: list[Path], limit: float) -> None:
    print("| input | nodes | devices | start | exact value | bound | gap | proven | seconds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for f in files:
        g = load_dnnpart(f)
        r = solve(g, "sequential", "exact", time_limit=limit)
        print(f"| {f.parent.name}/{f.stem} | {g.num_nodes} | {g.num_devices} | "
              f"{_ms(r.info.get('start_s', np.nan))} | {_ms(r.value)} | {_ms(r.bound)} | "
              f"{r.gap:.1%} | {'yes' if r.optimal else 'no'} | {r.solve_s:.0f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", type=Path, default=BENCH, help="the dnn-partitioning folder")
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds per exact solve")
    ap.add_argument("--match", default="", help="only inputs whose path contains this")
    ap.add_argument("--objectives", default="latency,sequential",
                    help="comma-separated: latency, sequential")
    args = ap.parse_args()
    files = sorted(f for f in args.bench.glob("latency-inputs/*/*.json") if args.match in str(f))
    if not files:
        raise SystemExit(f"no latency input under {args.bench} matches {args.match!r}")
    objectives = [o for o in args.objectives.split(",") if o]
    bad = set(objectives) - {"latency", "sequential"}
    if bad:
        raise SystemExit(f"--objectives: unknown {sorted(bad)[0]!r}; use latency, sequential")
    print(f"{_load()}; {args.time_limit:g} s per exact solve; values in ms\n")
    if "latency" in objectives:
        latency_table(files, args.bench, args.time_limit)
        print(f"\n{_load()}\n")
    if "sequential" in objectives:
        sequential_table(files, args.time_limit)
        print(f"\n{_load()}")


if __name__ == "__main__":
    main()
