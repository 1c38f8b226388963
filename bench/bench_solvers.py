"""Solve time and objective value of every method on every dnn-partitioning input
and on the three paper models.

    python bench/bench_solvers.py                  # all 24 inputs + 3 models, 60 s per MILP
    python bench/bench_solvers.py --quick          # layer graphs + models, 10 s per MILP
    python bench/bench_solvers.py --match OperatorGraphs --methods dp,milp-contig --models none
    python bench/bench_solvers.py --no-dnnpart --models resnet50 --time-limit 30

Inputs of ``throughput-inputs/`` are solved for the ``throughput`` objective
(DP, contiguous and non-contiguous MILP, baselines, and the human-expert split
of the layer graphs when there is one); inputs of ``latency-inputs/`` for
``sequential`` (MILP, alpha-expansion, baselines, and the two-device min cut on
CPU0 + ACC0) and ``parallel`` (HEFT and its lower bound). ``--methods`` takes
method names and ``human-expert``. Values are the simulator's, in ms;
the bound is each method's proven lower bound over its scope (``c`` marks
contiguous splits). The DP must finish each throughput OperatorGraphs
inference input within 60 s: the table flags any that does not.

Paper models (``--models``, default resnet50, inception_v3, bert_base; ``none``
skips them): the model's placement graph (``--coarsen``, default colocation as
in ``python -m hsdag_ray.solve``) with the costs of a profile of the local CPU
(OpenVINO per-op times, ``hsdag_core.device_profile.record``) plus the modeled
accelerators GPU_MODEL and GPU_SMALLMEM (64 MB for weights: every paper model
must split). Each ``--device-sets`` entry (default ``CPU+GPU_MODEL`` and
``CPU+GPU_SMALLMEM``) is solved for the three objectives: sequential (min cut,
alpha-expansion, MILP), throughput (DP, contiguous and non-contiguous MILP),
parallel (HEFT with its lower bound, the schedule MILP on graphs of at most 40
nodes), and the single-device and random baselines (``--objectives`` keeps some).
``DEVICE*N`` in a set is ``N`` interchangeable copies of one device, e.g.
``CPU+GPU_TINYMEM*8``. A method that does not
apply prints ``skipped`` with the reason. Profiles are cached in ``--cache``
(default ``bench/.cache``, git-ignored); ``--refresh`` records them again.

The sequential MILP's table on the ``latency-inputs/`` files (start, value, bound, gap)
is ``python bench/bench_latency.py --objectives sequential``.
"""
from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import numpy as np

from envs.simulator import Simulator
from hsdag_core.costgraph import CostGraph, restrict_devices
from hsdag_core.dnnpart import load_dnnpart, load_expert_split
from policies.solvers.exact import solve
from policies.solvers.result import SolveResult

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT.parent / "shared" / "benchmarks" / "dnn-partitioning"
CACHE = ROOT / "bench" / ".cache"
PLAN = {"throughput": ["dp", "milp-contig", "milp", "single", "random-best"],
        "sequential": ["milp", "alpha-expansion", "mincut", "single", "random-best"],
        "parallel": ["heft", "single", "random-best"]}
PAPER_MODELS = ("resnet50", "inception_v3", "bert_base")
DEVICE_SETS = ("CPU+GPU_MODEL", "CPU+GPU_SMALLMEM")
MODELED = ("GPU_MODEL", "GPU_SMALLMEM", "GPU_TINYMEM", "NPU_MODEL")
MODEL_PLAN = {"sequential": ["mincut", "alpha-expansion", "milp", "single", "random-best"],
              "throughput": ["dp", "milp-contig", "milp", "single", "random-best"],
              "parallel": ["heft", "milp", "single", "random-best"]}


def _ms(x: float) -> str:
    return f"{x * 1e3:10.3f}" if np.isfinite(x) else f"{'-':>10}"


def row(name: str, r: SolveResult) -> str:
    opt = "infeas" if not r.feasible else \
        ("yes" if r.optimal else "no") + ("c" if r.scope == "contiguous" else "")
    gap = f"{r.gap:7.2%}" if np.isfinite(r.gap) else f"{'-':>7}"
    return (f"{name:<54} {r.objective:<11}{r.method:<16}{_ms(r.value)} {_ms(r.bound)} {gap} "
            f"{opt:>6} {r.solve_s:8.2f}  {r.status[:60]}")


def _plain(x):
    """numpy scalars and arrays as JSON values (for json.dumps ``default``)."""
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"{type(x).__name__} is not JSON serializable")


def model_profile(model: str, cache: Path, refresh: bool = False):
    """The profile of ``model``: the local CPU measured, the devices of :data:`MODELED` modeled.

    Read from ``cache/profile_<model>.json`` when there (and it models every device of
    :data:`MODELED`), recorded and written there otherwise (or with ``refresh``).
    """
    from envs.profiling import record
    from hsdag_core.device_profile import Profile

    path = cache / f"profile_{model}.json"
    if path.is_file() and not refresh:
        cached = Profile.load(path)
        if set(MODELED) <= set(cached.devices):
            return cached, f"cached {path}"
    t0 = time.perf_counter()
    profile = record(model, ["CPU"], list(MODELED), fit=0, progress=False)
    cache.mkdir(parents=True, exist_ok=True)
    profile.save(path)
    return profile, f"recorded in {time.perf_counter() - t0:.1f} s, saved to {path}"


def solve_rows(name: str, graph: CostGraph, plan: dict, objectives, keep: set, limit: float,
               out: list) -> None:
    """Solve ``graph`` with every method of ``plan`` for ``objectives``; print a row each."""
    for obj in objectives:
        for method in plan[obj]:
            if keep and method not in keep:
                continue
            try:
                r = solve(graph, obj, method, time_limit=limit)
            except (ValueError, TimeoutError) as e:
                print(f"{name:<54} {obj:<11}{method:<16}{'skipped: ' + str(e)[:90]}", flush=True)
                continue
            print(row(name, r), flush=True)
            out.append({"input": name, **r.to_dict()})


def device_sets(spec: str) -> list[tuple[str, ...]]:
    """``A+B,C+D*4`` as device lists: ``D*4`` is four copies of ``D``."""
    out = []
    for s in filter(None, spec.split(",")):
        devices: list[str] = []
        for d in s.split("+"):
            name, star, count = d.partition("*")
            if star and not (count.isdigit() and int(count) > 0):
                raise ValueError(f"--device-sets: {d!r} needs a positive count after '*', "
                                 "e.g. GPU_TINYMEM*8")
            devices += [name] * (int(count) if count else 1)
        out.append(tuple(devices))
    return out


def _short(devices: tuple[str, ...]) -> list[str]:
    """Runs of one device as ``D*N``."""
    runs = [(d, len(list(same))) for d, same in itertools.groupby(devices)]
    return [d if n == 1 else f"{d}*{n}" for d, n in runs]


def run_models(args, keep: set, limit: float, out: list) -> None:
    """Rows of the paper models on each device set (see the module doc)."""
    from hsdag_core.coarsening import build_graph
    from hsdag_core.device_profile import cost_graph

    models = [] if args.models.strip().lower() == "none" else \
        [m for m in args.models.split(",") if m]
    for model in models:
        profile, how = model_profile(model, args.cache, args.refresh)
        _, _, comp, _ = build_graph(model, args.coarsen)
        print(f"\n{model}: {comp.num_nodes} nodes after {args.coarsen} coarsening, "
              f"{sum(n.weight_bytes for n in comp.nodes) / 1e6:.0f} MB of weights; "
              f"profile {how}", flush=True)
        for devices in args.sets:
            graph = cost_graph(comp, profile, list(devices))
            name = f"{model} {'+'.join(_short(devices))} ({graph.num_nodes}n)"
            solve_rows(name, graph, MODEL_PLAN, args.objectives, keep, limit, out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", type=Path, default=BENCH, help="benchmark folder")
    ap.add_argument("--quick", action="store_true",
                    help="layer graphs only, --time-limit 10")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="seconds per MILP / DP / search (default 60, 10 with --quick)")
    ap.add_argument("--match", default="", help="only benchmark inputs whose path contains this")
    ap.add_argument("--dnnpart", action=argparse.BooleanOptionalAction, default=True,
                    help="solve the benchmark folder's inputs (default yes; --no-dnnpart skips them)")
    ap.add_argument("--models", default=",".join(PAPER_MODELS),
                    help=f"comma-separated models solved with a profile, or none "
                         f"(default {','.join(PAPER_MODELS)})")
    ap.add_argument("--device-sets", default=",".join(DEVICE_SETS),
                    help=f"device sets of the models, A+B, comma-separated (default "
                         f"{','.join(DEVICE_SETS)}; devices: CPU, {', '.join(MODELED)})")
    ap.add_argument("--coarsen", default="colocation", choices=("none", "colocation", "openvino"),
                    help="graph of the models that is placed (default colocation)")
    ap.add_argument("--cache", type=Path, default=CACHE,
                    help="folder of the models' cached profiles (default bench/.cache)")
    ap.add_argument("--refresh", action="store_true", help="record the models' profiles again")
    ap.add_argument("--methods", default="", help="comma-separated subset of methods")
    ap.add_argument("--objectives", default="sequential,throughput,parallel",
                    help="the models' objectives, comma-separated (default all three)")
    ap.add_argument("--json", type=Path, help="also write every result to this JSON file")
    args = ap.parse_args()
    args.objectives = [o for o in args.objectives.split(",") if o]
    if set(args.objectives) - set(MODEL_PLAN):
        ap.error(f"--objectives: use {', '.join(MODEL_PLAN)}")
    try:
        args.sets = device_sets(args.device_sets)
    except ValueError as e:
        ap.error(str(e))
    limit = args.time_limit or (10.0 if args.quick else 60.0)
    keep = set(filter(None, args.methods.split(",")))
    files = sorted(args.bench.glob("*-inputs/*/*.json")) if args.dnnpart else []
    if args.quick:
        files = [f for f in files if f.parent.name == "LayerGraphs"]
    files = [f for f in files if args.match in str(f)]
    models = [] if args.models.strip().lower() == "none" else [m for m in args.models.split(",") if m]
    if not files and not models:
        raise SystemExit(f"nothing to solve: no input under {args.bench} matches (pass --bench "
                         "FOLDER, or drop --no-dnnpart) and --models is none")
    bad = sorted({d for ds in args.sets for d in ds} - {"CPU", *MODELED})
    if bad:
        ap.error(f"--device-sets: unknown device {bad[0]!r}; use CPU, {', '.join(MODELED)}")
    print(f"time limit {limit:g} s per method; values and bounds in ms; opt: yes = proven "
          "optimal (yesc: over contiguous splits), infeas = the placement breaks a memory "
          "limit, so its value is not reachable\n")
    print(f"{'input':<54} {'objective':<11}{'method':<16}{'value':>10} {'bound':>10} {'gap':>7} "
          f"{'opt':>6} {'solve_s':>8}  status")
    out: list = []
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
                    print(f"{name:<54} {obj:<11}{method:<16}{'skipped: ' + str(e)[:90]}", flush=True)
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
                print(f"{name:<54} {obj:<11}{'human-expert':<16}{_ms(res.value)} {'':>10} "
                      f"{'':>7} {'':>6} {time.perf_counter() - t0:8.2f}  "
                      f"{'feasible' if res.feasible else res.violation}", flush=True)
                out.append({"input": g.name, "method": "human-expert", "objective": obj,
                            "value_s": res.value, "feasible": res.feasible})
    run_models(args, keep, limit, out)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=_plain))


if __name__ == "__main__":
    main()
