"""Solve a placement problem with an exact or algorithmic method.

    python -m hsdag_ray.solve --graph FILE.json --objective throughput --method dp
    python -m hsdag_ray.solve --graph FILE.json --objective sequential --method milp \\
        --devices CPU0,ACC0,ACC1 --time-limit 30 --out placement.json --json

``--graph`` takes an input of the public dnn-partitioning benchmark
(:mod:`hsdag_core.dnnpart`) or one of DOPPLER's compute graphs (a ``.txt`` file:
:mod:`hsdag_core.doppler`, 4 identical GPUs, 8 for ``8gpu_*``); ``--model M --profile P.json`` places an OpenVINO
model's graph with the costs of a profile (:mod:`hsdag_core.device_profile`), and
``--out`` then keys the placement by OpenVINO op name, ready for
``python -m hsdag_ray.measure --placement``. ``--devices N`` keeps the graph's first ``N``
devices (CPUs first, then accelerators), ``--devices A,B`` keeps the named
ones. The output gives the simulator value of the placement, the method's
lower bound and gap, whether it is proven optimal, and the solve time. The
sequential MILP starts from the best heuristic placement (alpha-expansion, given a
quarter of ``--time-limit``, at most 5 s, the segments of a topological order, Baechi's
m-TOPO and m-ETF, the best single device), prints its value, and never returns a worse
one; given 10 s or more where memory binds, its bound also counts the transfers a split
into memory-sized parts must pay (a path bound, and a set partitioning bound computed by
column generation beside the branch and bound), and an integer program over the column
generation's sets may give a better placement than HiGHS's (the restricted master
heuristic).
``--out`` writes the result with the placement keyed by node name.

``--evaluate SPLIT.json`` scores a given placement instead of solving: a split in the
benchmark's ``{"cpus": [{"nodes": [ids]}], "fpgas": [...]}`` form (the human-expert
files; ``fpgas[j]`` runs on ``ACCj``), or a file written by ``--out``. A split over a
memory limit, or one using more accelerators than the input allows, is scored and
flagged, not refused.

Objectives: sequential, parallel, throughput and latency (Tarnawski et al.'s latency
model, :mod:`envs.call_latency`). Methods (``--list`` prints them): exact (the best exact
solver of the objective: ``policies.solvers.exact.EXACT_SOLVERS``), mincut,
alpha-expansion, segments (a split of a topological order; given 10 s or more where memory
binds, both bounds above in the time left), milp, milp-contig, dp, cpsat (the parallel objective's schedule model on
OR-Tools CP-SAT), heft, critical-path and critical-path-coded (DOPPLER's heuristic,
intended and as its repository codes it, best of 50 episodes), latency-greedy,
latency-search, m-topo, m-etf, m-sct (Baechi), single (``--device NAME`` for one device),
random-best (``--seed``, ``--samples``).

Exit codes: 0 a feasible placement was found; 1 none was (infeasible
problem, or a time limit hit before one was found); 2 bad input (missing or
malformed file, unknown method, objective or device), with one sentence on
stderr.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from envs.simulator import OBJECTIVES
from hsdag_ray.cli import UsageError, run
from hsdag_core.coarsening import COARSENINGS
from hsdag_core.costgraph import CostGraph, restrict_devices
from hsdag_core.dnnpart import load_dnnpart
from hsdag_core.doppler import load_doppler
from hsdag_core.models import MODEL_HELP
from policies.solvers.exact import SOLVERS, solve
from policies.solvers.result import SolveResult

__all__ = ["main", "load_graph", "format_result"]


def _select_devices(graph: CostGraph, spec: Optional[str]) -> CostGraph:
    if not spec:
        return graph
    if spec.isdigit():
        n = int(spec)
        if not 1 <= n <= graph.num_devices:
            raise UsageError(f"--devices {n}: the graph has {graph.num_devices} devices "
                             f"({', '.join(graph.devices)}); give 1 to {graph.num_devices}")
        return restrict_devices(graph, range(n))
    names = [d.strip() for d in spec.split(",") if d.strip()]
    unknown = [d for d in names if d not in graph.devices]
    if unknown:
        raise UsageError(f"--devices: unknown device(s) {', '.join(unknown)}; "
                         f"this graph has {', '.join(graph.devices)}")
    return restrict_devices(graph, [graph.devices.index(d) for d in names])


def load_graph(args: argparse.Namespace) -> CostGraph:
    """The problem named on the command line (one branch per kind of input)."""
    if args.model:
        return _select_devices(model_cost_graph(args)[1], args.devices)
    path = Path(args.graph)
    if not path.is_file():
        raise UsageError(f"--graph {args.graph}: no such file; give a dnn-partitioning "
                         "input (.json) or a DOPPLER compute graph (.txt)")
    try:
        graph = load_doppler(path) if path.suffix == ".txt" else load_dnnpart(path)
    except ValueError as e:
        raise UsageError(f"--graph: {e}") from None
    return _select_devices(graph, args.devices)


def model_cost_graph(args: argparse.Namespace):
    """``(placement graph, cost graph)`` of ``--model`` under ``--profile``."""
    from hsdag_core.coarsening import build_graph
    from hsdag_core.device_profile import Profile, cost_graph
    from hsdag_core.doppler import doppler_model, is_doppler_spec

    if is_doppler_spec(args.model) and not args.profile:  # the file's own costs
        try:
            cost, comp = doppler_model(args.model)
        except ValueError as e:
            raise UsageError(f"--model: {e}") from None
        return comp, cost
    if not args.profile:
        raise UsageError("--model needs --profile FILE (record one with python -m hsdag_ray.profile)")
    _, _, comp, _ = build_graph(args.model, args.coarsen)
    return comp, cost_graph(comp, Profile.load(args.profile))


def _ms(x: float) -> str:
    return f"{x * 1e3:.6g} ms" if np.isfinite(x) else "none"


def format_result(graph: CostGraph, r: SolveResult) -> str:
    """Human-readable lines for one result."""
    per_dev = np.bincount(r.placement, minlength=graph.num_devices)
    used = ", ".join(f"{graph.devices[d]} {c}" for d, c in enumerate(per_dev) if c)
    scope = " over contiguous splits" if r.scope == "contiguous" else ""
    verdict = "optimal" + scope if r.optimal else (
        "feasible" if r.feasible else "no feasible placement")
    gap = f"{r.gap:.3%}" if np.isfinite(r.gap) else "unknown"
    return "\n".join(line for line in [
        f"{graph.subgraph_summary()}",
        f"method {r.method}, objective {r.objective}: value {_ms(r.value)}, "
        f"bound {_ms(r.bound)}, gap {gap}, {verdict}",
        f"solved in {r.solve_s:.3f} s (planning time); {r.status}",
        f"started from {_ms(r.info['start_s'])} (the best heuristic placement)"
        if "start_s" in r.info else "",
        f"nodes per device: {used}" if r.feasible or np.isfinite(r.value) else ""]
        if line).rstrip()


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one-sentence :class:`UsageError`."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="python -m hsdag_ray.solve", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graph", help="dnn-partitioning input file (.json) or DOPPLER compute "
                    "graph (.txt)")
    ap.add_argument("--model", help=f"or a model, with --profile (none for doppler:FILE.txt, "
                    f"whose file holds its costs): {MODEL_HELP}")
    ap.add_argument("--profile", help="with --model: the profile JSON its costs come from")
    ap.add_argument("--coarsen", default="colocation", choices=COARSENINGS,
                    help="with --model: the graph placed (default colocation)")
    ap.add_argument("--objective", choices=OBJECTIVES, help="objective to minimise")
    ap.add_argument("--method", help="method name (see --list)")
    ap.add_argument("--devices", help="keep the first N devices, or a comma-separated list")
    ap.add_argument("--time-limit", type=float, default=60.0,
                    help="seconds for MILPs, DP, alpha-expansion, random-best (default 60)")
    ap.add_argument("--device", help="for --method single: the device (default: the best)")
    ap.add_argument("--seed", type=int, default=0, help="for --method random-best (default 0)")
    ap.add_argument("--samples", type=int, default=100, help="for --method random-best (default 100)")
    ap.add_argument("--out", help="write the result and placement (keyed by node name) as JSON")
    ap.add_argument("--evaluate", metavar="SPLIT.json",
                    help="score this placement instead of solving: a {cpus, fpgas} split or "
                         "a file written by --out")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--list", action="store_true", help="list the methods and exit")
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = build_parser()
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:     # --help
        return int(e.code or 0)
    if args.list:
        for name, s in SOLVERS.items():
            print(f"{name:16s} {', '.join(s.objectives):42s} {s.summary}")
        return 0
    if bool(args.graph) == bool(args.model):
        raise UsageError("give one of --graph FILE or --model M (see --help)")
    if args.evaluate:
        return evaluate(args)
    for flag in ("objective", "method"):
        if not getattr(args, flag):
            raise UsageError(f"--{flag} is required (see --help)")
    if args.method not in SOLVERS:
        raise UsageError(f"unknown method {args.method!r}; choose one of {', '.join(SOLVERS)}")
    if args.objective not in SOLVERS[args.method].objectives:
        raise UsageError(f"method {args.method} does not solve the {args.objective} objective; "
                         f"it solves {', '.join(SOLVERS[args.method].objectives)}")
    if args.time_limit is not None and args.time_limit <= 0:
        raise UsageError("--time-limit must be positive")
    graph = load_graph(args)
    options: dict = {}
    if args.method == "single" and args.device:
        if args.device not in graph.devices:
            raise UsageError(f"--device {args.device}: not a device of this graph "
                             f"({', '.join(graph.devices)})")
        options["device"] = args.device
    if args.method == "random-best":
        options.update(seed=args.seed, samples=args.samples)
    try:
        result = solve(graph, args.objective, args.method, time_limit=args.time_limit, **options)
    except ValueError as e:
        raise UsageError(str(e)) from None
    except TimeoutError as e:
        print(f"hsdag_ray.solve: {e}", file=sys.stderr)
        return 1
    doc = result.to_dict(graph)
    if args.model:
        # keyed by OpenVINO op name, as hsdag_ray.measure --placement takes it
        comp = model_cost_graph(args)[0]
        doc["placement"] = comp.expand_placement(doc["placement"])
    if args.out:
        try:
            Path(args.out).write_text(json.dumps(doc, indent=1))
        except OSError as e:
            raise UsageError(f"--out {args.out}: cannot write ({e.strerror})") from None
    if args.json:
        print(json.dumps(doc if args.out is None else {k: v for k, v in doc.items()
                                                        if k != "placement"}, indent=1))
    else:
        print(format_result(graph, result))
        if args.out:
            print(f"placement written to {args.out}")
    return 0 if result.feasible else 1


def _read_split(path: str) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise UsageError(f"--evaluate {path}: cannot read ({e.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UsageError(f"--evaluate {path}: not a JSON file; give a {{cpus, fpgas}} split "
                         "or a file written by --out") from None
    if not isinstance(data, dict) or not (isinstance(data.get("fpgas"), list)
                                          or isinstance(data.get("placement"), dict)):
        raise UsageError(f"--evaluate {path}: neither a {{cpus, fpgas}} split nor a file "
                         "written by --out (no 'fpgas' list or 'placement' object)")
    return data


def evaluate(args: argparse.Namespace) -> int:
    """``--evaluate``: the simulator's value of a given placement, flagged where it breaks
    a limit; exit 0 when the value is finite."""
    from envs.simulator import Simulator
    from hsdag_core.dnnpart import expert_split_from_dict, split_accelerators

    if not args.objective:
        raise UsageError("--objective is required (see --help)")
    data = _read_split(args.evaluate)
    graph = load_graph(args)
    flags: list[str] = []
    if "fpgas" in data:
        if args.model:
            raise UsageError("--evaluate: a {cpus, fpgas} split names benchmark node ids; "
                             "use it with --graph")
        used = split_accelerators(data)
        have = sum(d.startswith("ACC") for d in graph.devices)
        if used > have:
            flags.append(f"the split uses {used} accelerators where the input allows {have}")
            if args.devices:
                raise UsageError(f"--evaluate: the split uses ACC0..ACC{used - 1}; drop --devices")
            graph = load_dnnpart(Path(args.graph), extra_accs=used - have)
        try:
            p = expert_split_from_dict(data, graph)
        except ValueError as e:
            raise UsageError(f"--evaluate {args.evaluate}: {e}") from None
    else:
        try:
            p = graph.placement_from_names(data["placement"])
        except (KeyError, ValueError) as e:
            raise UsageError(f"--evaluate {args.evaluate}: {e.args[0]}") from None
    res = Simulator(graph).evaluate(p, args.objective)
    if res.violation:
        flags.append(res.violation)
    doc = {"graph": graph.name, "objective": args.objective, "value_s": res.value,
           "feasible": res.feasible and not flags, "flags": flags, "breakdown": res.breakdown}
    doc = {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in doc.items()}
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        print(f"{graph.subgraph_summary()}\nobjective {args.objective}: value {_ms(res.value)}"
              + "".join(f"\nflagged: {f}" for f in flags))
    return 0 if np.isfinite(res.value) else 1


if __name__ == "__main__":
    sys.exit(run(main, prog="hsdag_ray.solve"))
