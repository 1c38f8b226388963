"""Deploy a placement: ``python -m hsdag_ray.apply``.

Compiles the model with a placement on real devices, checks its outputs
against the unsplit model, times it next to every single device,
OpenVINO's AUTO device and OpenVINO's own HETERO splits over the devices (``hetero_auto``:
HETERO's default, each op on the first device in ``--devices`` order that supports it;
``hetero_pipeline``: ``MODEL_DISTRIBUTION_POLICY=PIPELINE_PARALLEL``, split by memory; a
mode that cannot run on the devices is a failed row saying why), prints the table and writes ``apply.json``; with
``--save DIR`` also writes the placed model, which
:func:`hsdag_ray.placed.load_placed` loads and runs (see that module).

Examples::

    # the best placement of a training run, on the devices it was trained for
    python -m hsdag_ray.apply --model resnet50 --devices CPU,CPU_F32 \\
        --placement runs/r50/best_placement.json --save deployed/r50
    # then, in any program
    python -c "from hsdag_ray.placed import load_placed; import numpy as np; \\
        m = load_placed('deployed/r50'); print(m(np.zeros((1, 3, 224, 224)))[0].shape)"
    # a shorthand placement through the stage pipeline
    python -m hsdag_ray.apply --model tiny_cnn --placement split:0.5 --backend pipeline

The placement is a JSON file mapping OpenVINO op friendly names to devices
(``best_placement.json`` of ``hsdag_ray.train``, or what ``hsdag_ray.solve``
writes), or ``all:DEVICE``, ``split:F``, ``random:SEED``. The outputs are
compared with the unsplit model run at f32 on the same random inputs; the
allowed relative error (max abs error / max abs output) is that of the least
precise device used: 1e-4 for f32, 1e-2 for f16, 5e-2 for bf16. Every
latency is the median of at least ``--repeats`` blocks of ``--block`` runs, more until
its 95% interval is within ``--precision`` of it or ``--precision-cap`` seconds stop them (times
``--rounds``, interleaved, the samples pooled), with the 95% interval of that median
(:mod:`envs.intervals`); the placement is called faster or slower than a row only when
their intervals do not overlap, and "within the noise" otherwise. ``apply.json`` goes to
``--out``, by default into ``--save DIR``, else beside the placement file.
Exit status: 0 when the placement ran and its outputs matched, 1 when it
failed or did not match, 2 for bad input (unknown model, a placement file
that is missing or made for another model, a device that does not exist here).

With ``--backend torch`` (devices ``cpu``, ``cpu:bf16``, ``cuda:N[:mem=SIZE]``, default
``cpu,cpu:bf16``) the model is the ``torch.export`` program and the placement maps its fx
node names to devices (``best_placement.json`` of a ``--backend torch`` run); the
placement runs split into torch stages and is timed next to every device alone and
Accelerate's ``device_map="auto"`` (the OpenVINO rows, AUTO and HETERO, do not apply);
the tolerance is that of :data:`envs.pytorch.backend.TOLERANCE`, and ``--save DIR``
writes the exported program, its inputs and the placement
(:mod:`envs.pytorch.placed`), which :func:`hsdag_ray.placed.load_placed` loads as well::

    python -m hsdag_ray.apply --backend torch --model tiny_cnn --devices cpu,cpu:bf16 \\
        --placement split:0.5 --save deployed/tiny
    python -c "from hsdag_ray.placed import load_placed; m = load_placed('deployed/tiny'); \\
        print(m.stages, m(*m.example_inputs)[0].shape)"
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

from envs.backends import BACKENDS, graph_source
from envs.base import Measurement, TimingConfig, summarize_times
from envs.intervals import WITHIN_NOISE, compare, half_width, interval_ms, median_interval
from envs.graph_backend import parse_placement
from envs.timing import precision_words
from envs.openvino_backend import (
    HETERO_MODES, TOLERANCE, OpenVINOBackend, complete_affinity, measure_auto, measure_hetero_mode,
    random_inputs,
)
from hsdag_ray.cli import RunError, UsageError, describe_devices, resolve_devices, run, writable_file
from hsdag_ray.flags import Parser, add_timing_args, timing_from_args
from hsdag_core.coarsening import build_graph
from hsdag_core.compgraph import parse_input_shapes
from hsdag_core.models import MODEL_HELP

__all__ = ["main", "apply", "TOLERANCE"]

#: the real OpenVINO backends a placement is applied with
MODES = tuple(name for name, kind in BACKENDS.items() if kind.real)


def _parser() -> argparse.ArgumentParser:
    ap = Parser(prog="python -m hsdag_ray.apply", description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help=MODEL_HELP)
    ap.add_argument("--placement", required=True,
                    help="placement JSON file (op name -> device, e.g. RUN/best_placement.json) "
                         "or all:DEVICE, split:F, random:SEED")
    ap.add_argument("--devices", default=None,
                    help="comma-separated device specs the placement uses (default CPU,CPU_F32; "
                         "with --backend torch cpu,cpu:bf16)")
    ap.add_argument("--backend", choices=MODES, default="auto",
                    help="how a split placement runs: auto (HETERO, the stage pipeline if HETERO "
                         "fails), hetero, pipeline, torch (the torch.export program split into "
                         "torch stages) (default auto)")
    ap.add_argument("--input-shape", help="static input shape(s) for a dynamic file model")
    ap.add_argument("--save", metavar="DIR", help="write the placed model here (IR + stages + manifest)")
    ap.add_argument("--out", metavar="FILE", help="where to write apply.json (default: see above)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="time the placement, each device and AUTO this many times, interleaved, "
                         "and pool the samples (default 1)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random input data (default 0)")
    ap.add_argument("--json", action="store_true", help="print apply.json on stdout instead of the table")
    add_timing_args(ap)
    return ap


def _reference(model, device_set, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Outputs of the unsplit model at f32 on the first device's hardware."""
    import openvino as ov

    base = next(iter(device_set.specs.values())).base
    compiled = device_set.core.compile_model(model, base, {ov.properties.hint.inference_precision(): ov.Type.f32})
    request = compiled.create_infer_request()
    request.infer([ov.Tensor(a) for a in inputs])
    return [request.get_output_tensor(i).data.copy() for i in range(len(compiled.outputs))]


def output_error(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> tuple[float, float]:
    """Max abs error and relative error (max abs error / max abs reference) over all outputs."""
    max_abs = max_rel = 0.0
    for out, ref in zip(outputs, reference):
        if ref.dtype.kind != "f":
            err = float(np.count_nonzero(out != ref))
            max_abs, max_rel = max(max_abs, err), (math.inf if err else max_rel)
            continue
        err = float(np.max(np.abs(out.astype(np.float64) - ref))) if ref.size else 0.0
        scale = float(np.max(np.abs(ref))) if ref.size else 0.0
        max_abs, max_rel = max(max_abs, err), max(max_rel, err / max(scale, 1e-12))
    return max_abs, max_rel


def _row(name: str, m: Measurement) -> dict[str, Any]:
    return {"name": name, **m.to_dict()}


def _versus(row: dict[str, Any], placed: Measurement) -> None:
    """Add to a row the placement's speed-up over it and the comparison's words: the
    placement is ``faster``/``slower`` than the row only when their 95% intervals do not
    overlap, else ``within the noise`` (:func:`envs.intervals.compare`)."""
    ok = row["ok"] and placed.ok
    row["placement_speedup"] = (row["latency_s"] / placed.latency_s) if ok else None
    row["placement_is"] = compare(placed.interval_s, row.get("interval_s")) if ok else None


def _combine(rounds: Sequence[Measurement]) -> Measurement:
    """One measurement from several rounds: all samples pooled (the first failure if any)."""
    failed = [m for m in rounds if not m.ok]
    if failed:
        return failed[0]
    samples = [t for m in rounds for t in m.samples_s]
    latency, spread = summarize_times(samples)
    info = {**rounds[0].info, "rounds": len(rounds)}
    each = [m.info["precision"] for m in rounds if isinstance(m.info.get("precision"), dict)]
    if each:  # the pooled interval's precision; capped when a round's cap stopped it short
        reached = half_width(latency, median_interval(samples)[:2])
        info["precision"] = {**each[0], "reached": reached, "blocks": len(samples),
                             "capped": any(p["capped"] for p in each) and reached > each[0]["target"]}
    return Measurement(ok=True, latency_s=latency, spread=spread, runs=sum(m.runs for m in rounds),
                       backend=rounds[0].backend, samples_s=samples, info=info)


def apply(args: argparse.Namespace, say=print) -> dict[str, Any]:
    """Measure, check and optionally save one placement; return the apply.json contents.

    Raises:
        UsageError / GraphError: bad model, placement or devices (exit 2).
        RunError: the placement failed to run or its outputs did not match (exit 1).
    """
    timing = timing_from_args(args, validate=True)
    if args.rounds < 1:
        raise UsageError("--rounds must be at least 1")
    default = ",".join(BACKENDS[args.backend].default_devices)
    specs = [d for d in (default if args.devices is None else args.devices).split(",") if d]
    if not specs:
        raise UsageError(f"--devices is empty; name the devices, e.g. --devices {default}")
    return _APPLIERS[graph_source(args.backend)](args, timing, specs, say)


def _apply_openvino(args: argparse.Namespace, timing: TimingConfig, specs: list[str],
                    say) -> dict[str, Any]:
    """:func:`apply` on an OpenVINO backend: the placement compiled as ``--backend`` runs
    it, each device alone, OpenVINO AUTO and HETERO's own splits, interleaved."""
    names, model, graph, placement, counts = _read_placement(args, timing, specs, say)
    affinity = complete_affinity(model, graph.expand_placement(placement))
    backend = OpenVINOBackend(model, specs, mode=args.backend, timing=timing, seed=args.seed)
    placed = backend.measure_ops(affinity)
    result: dict[str, Any] = {
        "model": args.model, "placement_file": args.placement, "devices": specs,
        "described_devices": describe_devices(specs, timing.threads), "backend": args.backend,
        "nodes_per_device": {d: counts[d] for d in names if counts[d]},
        "timing": {"warmup": timing.warmup, "repeats": timing.repeats, "block": timing.block,
                   "precision": timing.precision, "precision_cap_s": timing.precision_cap_s,
                   "threads": timing.threads, "rounds": args.rounds}, "seed": args.seed,
        "placed": _row("placement", placed), "single": {}, "auto": None, "hetero": {},
        "saved": None,
    }
    if not placed.ok:
        result["error"] = f"the placement failed at {placed.stage}: {placed.error}"
        return result
    # each device alone, the whole model compiled on it (validated too: its own error), and AUTO
    whole = backend if backend.mode != "pipeline" else OpenVINOBackend(model, specs, "auto", timing, args.seed)
    jobs: dict[str, Callable[[], Measurement]] = {"placement": lambda: backend.measure_ops(affinity)}
    for name in names:
        jobs[name] = partial(whole.measure_ops, {op: name for op in affinity})
    jobs["auto"] = partial(measure_auto, model, specs, replace(timing, validate_outputs=False), seed=args.seed)
    for mode in HETERO_MODES:
        jobs[mode] = partial(measure_hetero_mode, model, specs, mode,
                             replace(timing, validate_outputs=False), seed=args.seed)
    rounds = _interleave(jobs, placed, args.rounds)
    placed = _combine(rounds["placement"])
    result["placed"] = _row("placement", placed)
    result["single"] = {name: _row(f"{name} only", _combine(rounds[name])) for name in names}
    result["auto"] = _row("OpenVINO AUTO", _combine(rounds["auto"]))
    result["hetero"] = {mode: _row(HETERO_ROWS[mode], _combine(rounds[mode])) for mode in HETERO_MODES}
    for row in [*result["single"].values(), result["auto"], *result["hetero"].values()]:
        _versus(row, placed)
    if args.save:
        result["saved"] = _save_and_check(args.save, model, affinity, specs, timing, placed,
                                          backend.device_set, args.seed)
    return result


def _read_placement(args: argparse.Namespace, timing: TimingConfig, specs: list[str], say):
    """The run's device names, the model and its graph from the backend's graph source, the
    placement read onto that graph and its node count per device (said in one line)."""
    names = resolve_devices(specs, timing.threads, args.backend)
    model, graph, _, _ = build_graph(args.model, "none", parse_input_shapes(args.input_shape),
                                     graph_source(args.backend))
    placement = parse_placement(args.placement, graph, names)
    counts = Counter(placement.values())
    say(f"{args.model}: {graph.num_nodes} nodes; placement "
        + ", ".join(f"{d} {counts[d]}" for d in names if counts[d]))
    return names, model, graph, placement, counts


def _interleave(jobs: dict[str, Callable[[], Measurement]], placed: Measurement,
                n: int) -> dict[str, list[Measurement]]:
    """Each job's measurements over ``n`` rounds, ``placed`` being the placement's first."""
    rounds: dict[str, list[Measurement]] = {key: [] for key in jobs}
    rounds["placement"].append(placed)
    for r in range(n):  # interleaved, so a slow spell of the machine hits every run alike
        for key, job in jobs.items():
            if len(rounds[key]) <= r:
                rounds[key].append(job())
    return rounds


def _apply_torch(args: argparse.Namespace, timing: TimingConfig, specs: list[str], say) -> dict[str, Any]:
    """:func:`apply` on the torch backend: the placement split into torch stages, each device
    alone and Accelerate's ``device_map="auto"`` (no OpenVINO row), ``--save`` as
    :mod:`envs.pytorch.placed` writes it."""
    from envs.pytorch.backend import TOLERANCE as TORCH_TOLERANCE, TorchBackend

    names, program, graph, placement, counts = _read_placement(args, timing, specs, say)
    affinity = graph.expand_placement(placement)
    backend = TorchBackend(graph, program, specs, timing)
    placed = backend.measure_ops(affinity)
    result: dict[str, Any] = {
        "model": args.model, "placement_file": args.placement, "devices": specs,
        "described_devices": describe_devices(specs, timing.threads, args.backend),
        "backend": args.backend, "nodes_per_device": {d: counts[d] for d in names if counts[d]},
        "timing": {"warmup": timing.warmup, "repeats": timing.repeats, "block": timing.block,
                   "precision": timing.precision, "precision_cap_s": timing.precision_cap_s,
                   "threads": timing.threads, "rounds": args.rounds}, "seed": args.seed,
        "placed": _row("placement", placed), "single": {}, "auto": None, "hetero": {}, "own": {},
        "saved": None,
    }
    if not placed.ok:
        result["error"] = f"the placement failed at {placed.stage}: {placed.error}"
        return result
    jobs: dict[str, Callable[[], Measurement]] = {"placement": lambda: backend.measure_ops(affinity)}
    for name in names:
        jobs[name] = partial(backend.measure_ops, {op: name for op in affinity})
    for name, own in backend.own_baselines().items():
        jobs[name] = (partial(Measurement.failure, backend.name, "baseline", own) if isinstance(own, str)
                      else partial(backend.measure_array, own))
    rounds = _interleave(jobs, placed, args.rounds)
    placed = _combine(rounds["placement"])
    tolerance = max(TORCH_TOLERANCE[backend.by_name[d].dtype] for d in placement.values())
    outputs = backend.outputs(affinity)
    reference = [t.numpy() for t in backend.reference()]
    max_abs, max_rel = output_error([t.numpy() for t in outputs], reference)
    placed.info.update(max_abs_error=max_abs, max_rel_error=max_rel, tolerance=tolerance)
    rows = {}
    for key, ms in rounds.items():
        label = {"placement": "placement", "accelerate_auto": "Accelerate device_map=auto"}.get(
            key, f"{key} only" if key in names else key)
        rows[key] = row = _row(label, placed if key == "placement" else _combine(ms))
        row["info"].setdefault("path", "torch")  # the table's "how": torch, N stages
        if "output_error" in row["info"]:
            row["info"].setdefault("max_rel_error", row["info"]["output_error"])
    result["placed"] = rows.pop("placement")
    result["single"] = {name: rows[name] for name in names}
    result["own"] = {key: row for key, row in rows.items() if key not in names}
    for row in [*result["single"].values(), *result["own"].values()]:
        _versus(row, placed)
    if args.save:
        from envs.pytorch.placed import save_placed
        from hsdag_ray.placed import load_placed

        try:
            save_placed(args.save, program, affinity, specs)
            loaded = load_placed(args.save)
        except (ValueError, OSError) as exc:
            raise RunError(f"cannot save the placed model to {args.save}: {exc}") from None
        max_abs, max_rel = output_error([t.numpy() for t in loaded(*program.example_inputs)], reference)
        result["saved"] = {"dir": str(Path(args.save).resolve()), "path": "torch",
                           "stages": len(loaded.stages), "max_abs_error": max_abs,
                           "max_rel_error": max_rel, "tolerance": tolerance, "ok": max_rel <= tolerance}
    return result



#: how a placement is applied, by the graph source of its backend
_APPLIERS = {"openvino": _apply_openvino, "torch": _apply_torch}

def _save_and_check(directory: str, model, affinity, specs, timing: TimingConfig,
                    placed: Measurement, device_set, seed: int) -> dict[str, Any]:
    """Write the placed model, load it back in a fresh Core and compare its outputs."""
    from hsdag_ray.placed import load_placed, save_placed

    path = str(placed.info.get("path", "pipeline"))
    try:
        save_placed(directory, model, affinity, specs, path, threads=timing.threads)
        loaded = load_placed(directory)
    except (ValueError, OSError) as exc:
        raise RunError(f"cannot save the placed model to {directory}: {exc}") from None
    inputs = random_inputs(model, seed)
    max_abs, max_rel = output_error(loaded(inputs), _reference(model, device_set, inputs))
    precisions = {device_set.info(d).precision for d in loaded.devices}
    tolerance = max(TOLERANCE.get(p, max(TOLERANCE.values())) for p in precisions)
    return {"dir": str(Path(directory).resolve()), "path": path, "stages": len(loaded.manifest["stages"]),
            "max_abs_error": max_abs, "max_rel_error": max_rel, "tolerance": tolerance,
            "ok": max_rel <= tolerance}


#: the table's name of each of OpenVINO's own HETERO splits
HETERO_ROWS = {"hetero_auto": "OpenVINO HETERO (default)",
               "hetero_pipeline": "OpenVINO HETERO pipeline"}


def _ms(v: Optional[float]) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v * 1e3:.3f}"


def _verdict(row: dict[str, Any]) -> str:
    """What the placement is against ``row``: its speed-up when the intervals part, else
    within the noise."""
    speed, word = row.get("placement_speedup"), row.get("placement_is")
    if speed is None:
        return "-"
    return "noise" if word == WITHIN_NOISE else f"{speed:.2f}x"


def table(result: dict[str, Any]):
    """The result as a rich table, narrow enough for an 80-column terminal: the placement,
    each single device, AUTO, HETERO's own splits, Accelerate's map; latencies in ms with
    their 95% intervals; ``placed`` is the row's latency over the placement's, ``noise``
    where the two intervals overlap."""
    from rich.table import Table

    tab = Table(title=f"{result['model']}: placement {result['placement_file']}\n(ms; placed = "
                      "row over placement, noise = intervals overlap)", title_justify="left",
                show_edge=False, pad_edge=False)
    for col, justify in (("run", "left"), ("median", "right"), ("95% interval", "right"),
                         ("placed", "right"), ("rel err", "right"), ("how", "left")):
        tab.add_column(col, justify=justify, no_wrap=col not in ("run", "how"),
                       overflow="fold", max_width=22 if col in ("run", "how") else None)
    for row in _rows(result):
        info = row["info"]
        if not row["ok"]:
            tab.add_row(row["name"], "failed", "", "", "", f"{row['stage']}: {row['error']}")
            continue
        err = f"{info['max_rel_error']:.0e}" if "max_rel_error" in info else "-"
        how = str(info.get("path", ""))
        if how in ("pipeline", "torch"):
            how += f", {info.get('stages')} stage" + ("s" if info.get("stages") != 1 else "")
        if info.get("execution_devices"):
            how = f"on {','.join(info['execution_devices'])}"
        tab.add_row(row["name"], _ms(row["latency_s"]), interval_ms(row.get("interval_s")), _verdict(row), err, how,
                    style="bold" if row is result["placed"] else None)
    return tab


def _rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The result's rows in table order: the placement, each device, AUTO, HETERO, own."""
    return [result["placed"], *result["single"].values()] + ([result["auto"]] if result["auto"] else []) \
        + list((result.get("hetero") or {}).values()) + list((result.get("own") or {}).values())


def _json_path(args: argparse.Namespace) -> Path:
    if args.out:
        return Path(args.out)
    if args.save:
        return Path(args.save) / "apply.json"
    placement = Path(args.placement)
    return placement.parent / "apply.json" if placement.is_file() else Path("apply.json")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    from rich.console import Console

    out = Console(file=sys.stdout, highlight=False, soft_wrap=True)
    say = (lambda msg: None) if args.json else out.print
    # refused before anything is measured
    path = writable_file(_json_path(args), "--out" if args.out or not args.save else "--save")
    result = apply(args, say)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for line in result["described_devices"]:
            say(f"device {line}")
        out.print(table(result))
        for row in _rows(result):
            if row["ok"] and (row["info"].get("precision") or {}).get("capped"):
                say(f"{row['name']}: {precision_words(row['info'])}")
        placed = result["placed"]
        if placed["ok"]:
            info = placed["info"]
            say(f"outputs match the unsplit f32 model: relative error {info['max_rel_error']:.2g} "
                f"(tolerance {info['tolerance']:g})")
        saved = result["saved"]
        if saved:
            say(f"placed model saved to {saved['dir']} ({saved['path']}"
                + (f", {saved['stages']} stage(s)" if saved["stages"] else "")
                + f"); reloaded, its outputs {'match' if saved['ok'] else 'DO NOT match'} "
                  f"(relative error {saved['max_rel_error']:.2g})")
        say(f"results in {path}")
    if "error" in result:
        raise RunError(result["error"])
    if result["saved"] and not result["saved"]["ok"]:
        raise RunError(f"the saved model's outputs differ from the unsplit model's "
                       f"(relative error {result['saved']['max_rel_error']:.3g})")
    return 0


if __name__ == "__main__":
    sys.exit(run(main, prog="hsdag_ray.apply"))
