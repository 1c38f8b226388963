"""The prepared GPU check: the torch backend on a real CPU + NVIDIA GPU pair, in one short run.

Run it as ``bash bench/gpu_check.sh OUT_DIR`` on a machine with PyTorch, transformers and
accelerate (no Ray, OpenVINO or W&B needed: it runs the methods in-process,
:mod:`hsdag_ray.inprocess`). It writes ``OUT_DIR/gpu_check.json`` and
``OUT_DIR/gpu_check.md`` after every section, so a run stopped early keeps what it measured.

Sections:

``fidelity``
    For two models, a torch profile of ``cpu`` + the GPU (per-node times, link costs fitted
    to a few real splits), then placements of several kinds (contiguous splits, blocks,
    random) measured twice on the real devices: the simulator's Spearman rank correlation
    with the first measurement, and the second measurement's with the first (the ceiling
    any model can reach on this machine).
``capped``
    A model that does not fit the GPU as capped (GPT-2 medium's width with 6 of its 24
    layers, 512 MB of random weights, the GPU capped at 200 MB; the exact solver's MILP
    with a memory limit grows too slow for refit's per-proposal solves beyond a few hundred
    nodes): the whole model on the CPU, on the uncapped GPU
    (what it would take if it fitted), Hugging Face Accelerate's ``device_map="auto"`` for
    the same cap, the exact solver on the profile, and ``refit`` and ``hsdag`` at a small
    budget of measured placements; the finalists re-measured interleaved.
``throughput``
    The same pair under the throughput objective (pipelined inference, Tarnawski et al.):
    the exact throughput placement on the profile against the sequential one, by the
    profile's time per sample, the measured time per sample of pipelined inference
    (:mod:`envs.pytorch.pipelined`), and the measured latency of one inference.

``--gpu cpu:bf16`` runs the same check with the CPU's bfloat16 device standing in for the
GPU (how it is tested without one); ``--quick`` uses smaller models and budgets.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

__all__ = ["main"]

#: (fidelity models, capped model, its cap, hsdag budget, refit budget) per size
PLANS = {
    "full": (["tv:resnet50", "hf:distilbert"],
             "hf:gpt2:n_layer=6:n_embd=1024:n_head=16:seq=64", "200MB", 200, 40),
    "quick": (["tiny_cnn", "hf:gpt2:n_layer=2:n_embd=64:n_head=2:seq=16"],
              "hf:gpt2:n_layer=6:n_embd=128:n_head=4:seq=16", "2MB", 40, 12),
}


class Report:
    """The check's figures, written as JSON and markdown after every section."""

    def __init__(self, out: Path) -> None:
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.data: dict[str, Any] = {"sections": {}}
        self.md: list[str] = []

    def section(self, name: str, figures: Any, lines: Sequence[str]) -> None:
        self.data["sections"][name] = figures
        self.md += list(lines) + [""]
        self.write()

    def write(self) -> None:
        (self.out / "gpu_check.json").write_text(json.dumps(self.data, indent=1, default=float))
        (self.out / "gpu_check.md").write_text("\n".join(self.md) + "\n")


def _say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def _timing(heavy: bool):
    from envs.base import TimingConfig

    if heavy:
        return TimingConfig(warmup=1, repeats=3, block=1, timeout_s=60.0, threads=0)
    return TimingConfig(warmup=2, repeats=5, block=2, timeout_s=60.0, threads=0)


_BUILT: dict[str, tuple] = {}


def _graphs(spec: str):
    """The program, fine and coarse graphs of ``spec`` (exported once per run)."""
    from hsdag_core.coarsening import build_graph, coarsen

    if spec not in _BUILT:
        program, fine, _, _ = build_graph(spec, "none", None, "torch")
        _BUILT[spec] = (program, fine, coarsen(fine, "colocation")[0])
    return _BUILT[spec]


def _profile(spec: str, devices: list[str], fit: int, timing):
    from envs.profiling import record

    program, fine, _ = _graphs(spec)
    return record(spec, devices, fit=fit, timing=timing, progress=False, backend="torch",
                  built=(program, fine))


def _release() -> None:
    """Free what a section left on the GPU (cached copies of parameters), so the next
    section's memory cap starts from an empty allocator."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _ms(v: Optional[float]) -> str:
    return "-" if v is None or not np.isfinite(v) else f"{v * 1e3:.2f}"


def fidelity(spec: str, gpu: str, count: int, report_rows: list) -> dict:
    """Simulator against a real measurement, and a second real measurement against the first."""
    from scipy.stats import spearmanr

    from envs.pytorch.backend import TorchBackend
    from envs.simulator import Simulator
    from hsdag_core.device_profile import cost_graph, split_placements

    devices = ["cpu", gpu]
    t0 = time.perf_counter()
    timing = _timing(False)
    profile = _profile(spec, devices, 8, timing)
    program, _, coarse = _graphs(spec)
    names = [d.split(":mem=")[0] for d in devices]
    costs = cost_graph(coarse, profile, names)
    sim = Simulator(costs)
    backend = TorchBackend(coarse, program, devices, timing)
    placements = [np.zeros(coarse.num_nodes, np.int64), np.ones(coarse.num_nodes, np.int64)]
    placements += split_placements(coarse.num_nodes, 2, count - 2, seed=1)
    first, second, predicted = [], [], []
    for p in placements:
        a, b = backend.measure_array(p), backend.measure_array(p)
        if a.ok and b.ok:
            first.append(a.latency_s)
            second.append(b.latency_s)
            predicted.append(sim.sequential(p).value)
    out = {"model": spec, "devices": names, "nodes": coarse.num_nodes, "placements": len(first),
           "spearman_simulator": float(spearmanr(predicted, first).statistic),
           "spearman_remeasured": float(spearmanr(second, first).statistic),
           "mean_rel_error": float(np.mean(np.abs(np.array(predicted) - first) / np.array(first))),
           "cpu_only_s": first[0], "gpu_only_s": first[1], "seconds": time.perf_counter() - t0,
           "link_fit": profile.fit}
    report_rows.append(f"| {spec} | {coarse.num_nodes} | {len(first)} | {out['spearman_simulator']:.2f} | "
                       f"{out['spearman_remeasured']:.2f} | {out['mean_rel_error']:.0%} | "
                       f"{_ms(out['cpu_only_s'])} | {_ms(out['gpu_only_s'])} |")
    _say(f"fidelity {spec}: Spearman simulator {out['spearman_simulator']:.2f}, re-measured "
         f"{out['spearman_remeasured']:.2f} over {len(first)} placements")
    return out


def capped(spec: str, gpu: str, cap: str, hsdag_budget: int, refit_budget: int, seed: int) -> dict:
    """The capped-GPU comparison (see the module docstring)."""
    from envs.measuring import remeasure
    from envs.pytorch.backend import TorchBackend
    from hsdag_core.device_profile import cost_graph
    from hsdag_ray.inprocess import run_method
    from policies.solvers.exact import exact_method, solve

    timing = _timing(True)
    program, _, coarse = _graphs(spec)
    n = coarse.num_nodes
    out: dict[str, Any] = {"model": spec, "nodes": n, "cap": cap,
                           "weights_mb": program.parameter_bytes() / 1e6, "rows": {}}
    rows = out["rows"]
    # the GPU uncapped first: the per-process memory cap, once set, stays for the process
    free = TorchBackend(coarse, program, ["cpu", gpu], timing)
    m = free.measure_array(np.ones(n, np.int64))
    rows["gpu_uncapped"] = {"latency_s": m.latency_s if m.ok else None, "placement": [1] * n,
                            "note": "the whole model on the GPU without the cap"}
    del free
    _release()
    devices = ["cpu", f"{gpu}:mem={cap}"]
    names = ["cpu", gpu]
    t0 = time.perf_counter()
    profile = _profile(spec, devices, 6, timing)
    out["profile_s"] = time.perf_counter() - t0
    costs = cost_graph(coarse, profile, names)
    backend = TorchBackend(coarse, program, devices, timing)
    candidates: dict[str, np.ndarray] = {"cpu_only": np.zeros(n, np.int64),
                                         "gpu_only": np.ones(n, np.int64)}
    acc = backend.own_baselines()["accelerate_auto"]
    if isinstance(acc, str):
        rows["accelerate_auto"] = {"latency_s": None, "note": acc}
    else:
        candidates["accelerate_auto"] = np.asarray(acc)
    method = exact_method(costs, "sequential")
    res = solve(costs, "sequential", method, time_limit=60.0)
    if res.feasible:
        candidates["exact_on_profile"] = np.asarray(res.placement, np.int64)
        out["exact"] = {"method": method, "proven": bool(res.optimal), "profile_value_s": float(res.value)}
    for name, budget in (("refit", refit_budget), ("hsdag", hsdag_budget)):
        t0 = time.perf_counter()
        r = run_method(name, coarse, backend, costs=costs, budget=budget, seed=seed, say=_say,
                       progress=False)
        rows[name] = {"found_s": r["latency_s"], "measured": r["measured"],
                      "seconds": time.perf_counter() - t0, "curve_s": r["curve"]}
        if r["placement"] is not None:
            candidates[name] = np.asarray(r["placement"], np.int64)
    import torch

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    final = remeasure(lambda p: backend.measure_array(p).to_dict(), candidates, rounds=3)
    if torch.cuda.is_available():  # the finalists' peak under the cap
        out["gpu_peak_allocated_mb"] = torch.cuda.max_memory_allocated() / 2 ** 20
    for name, fig in final.items():
        rows.setdefault(name, {}).update(fig)
        rows[name]["gpu_nodes"] = int(np.asarray(candidates[name]).sum())
    return out


def throughput(spec: str, gpu: str, cap: str) -> dict:
    """The throughput objective on the capped pair: the exact throughput and sequential
    placements on the profile, each measured as one inference at a time and pipelined."""
    from envs.pytorch.backend import TorchBackend
    from envs.simulator import Simulator
    from hsdag_core.device_profile import cost_graph
    from policies.solvers.exact import exact_method, solve

    timing = _timing(True)
    program, _, coarse = _graphs(spec)
    devices = ["cpu", f"{gpu}:mem={cap}"]
    profile = _profile(spec, devices, 0, timing)
    costs = cost_graph(coarse, profile, ["cpu", gpu])
    sim = Simulator(costs)
    out: dict[str, Any] = {"model": spec, "cap": cap}
    solved: dict[str, np.ndarray] = {}
    for objective in ("throughput", "sequential"):
        method = exact_method(costs, objective)
        res = solve(costs, objective, method, time_limit=60.0)
        if not res.feasible:
            out[objective] = {"status": res.status}
            continue
        p = solved[objective] = np.asarray(res.placement, np.int64)
        out[objective] = {"method": method, "proven": bool(res.optimal),
                          "time_per_sample_s": float(sim.throughput(p).value),
                          "sequential_s": float(sim.sequential(p).value), "gpu_nodes": int(p.sum())}
    # one capped backend at a time: each holds its own copies on the GPU
    for measured, key in (("sequential", "measured_latency_s"), ("throughput", "measured_per_sample_s")):
        backend = TorchBackend(coarse, program, devices, timing, objective=measured)
        for objective, p in solved.items():
            m = backend.measure_array(p)
            out[objective][key] = m.latency_s if m.ok else None
            if not m.ok:
                out[objective][key.replace("_s", "_error")] = m.error
        del backend
        _release()
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="folder for gpu_check.json and gpu_check.md")
    ap.add_argument("--gpu", default="cuda:0", help="the GPU's device (default cuda:0; cpu:bf16 "
                    "stands in for it on a machine without one)")
    ap.add_argument("--quick", action="store_true", help="smaller models and budgets")
    ap.add_argument("--skip", default="", help="sections to skip, comma-separated")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    import torch

    fid_models, cap_model, cap, hsdag_budget, refit_budget = PLANS["quick" if args.quick else "full"]
    report = Report(Path(args.out))
    gpu_name = (torch.cuda.get_device_name(0) if args.gpu.startswith("cuda") and torch.cuda.is_available()
                else args.gpu)
    report.data.update(device=gpu_name, torch=torch.__version__, python=platform.python_version(),
                       cpu_threads=torch.get_num_threads(), plan="quick" if args.quick else "full")
    report.md += [f"# GPU check: cpu + {args.gpu} ({gpu_name})", "",
                  f"PyTorch {torch.__version__}, Python {platform.python_version()}, "
                  f"{torch.get_num_threads()} CPU threads; plan {report.data['plan']}.", ""]
    report.write()
    skip = set(filter(None, args.skip.split(",")))
    t_all = time.perf_counter()
    if "fidelity" not in skip:
        rows = ["## Simulator fidelity (torch profile of cpu + GPU)", "",
                "| model | nodes | placements | Spearman sim vs measured | Spearman re-measured "
                "| mean error | cpu only (ms) | GPU only (ms) |", "|---|---|---|---|---|---|---|---|"]
        figs = [fidelity(spec, args.gpu, 20, rows) for spec in fid_models]
        report.section("fidelity", figs, rows)
        _release()
    if "capped" not in skip:
        _say(f"capped: {cap_model} with the GPU capped at {cap}")
        figs = capped(cap_model, args.gpu, cap, hsdag_budget, refit_budget, args.seed)
        lines = [f"## A model that does not fit the capped GPU: {cap_model}, GPU capped at {cap}", "",
                 f"{figs['weights_mb']:.0f} MB of weights, {figs['nodes']} nodes; "
                 f"re-measured in 3 interleaved rounds (median).", "",
                 "| placement | latency (ms) | spread | nodes on GPU | measured placements |",
                 "|---|---|---|---|---|"]
        for name, row in figs["rows"].items():
            lat = row.get("latency_s")
            note = row.get("error") or row.get("note") or ""
            lines.append(f"| {name} | {_ms(lat)} | "
                         + (f"{row['spread']:.1%}" if row.get("spread") is not None else "-")
                         + f" | {row.get('gpu_nodes', '-')} | {row.get('measured', '-')} |"
                         + (f" {note[:120]}" if note and not (lat is not None and np.isfinite(lat))
                            else ""))
        report.section("capped", figs, lines)
        _release()
    if "throughput" not in skip:
        _say("throughput objective")
        figs = throughput(cap_model, args.gpu, cap)
        lines = [f"## Throughput objective on the same pair ({cap_model}, GPU capped at {cap})", "",
                 "| solved for | profile time per sample (ms) | measured time per sample, pipelined (ms) "
                 "| profile latency (ms) | measured latency (ms) | nodes on GPU |",
                 "|---|---|---|---|---|---|"]
        for obj in ("throughput", "sequential"):
            f = figs.get(obj, {})
            lines.append(f"| {obj} | {_ms(f.get('time_per_sample_s'))} | {_ms(f.get('measured_per_sample_s'))} "
                         f"| {_ms(f.get('sequential_s'))} | {_ms(f.get('measured_latency_s'))} "
                         f"| {f.get('gpu_nodes', '-')} |")
        report.section("throughput", figs, lines)
    report.data["seconds"] = time.perf_counter() - t_all
    report.write()
    _say(f"done in {report.data['seconds']:.0f} s; figures in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
