"""Deploy a placement: ``python -m hsdag_ray.apply``.

Reads the placement onto the graph of the ``--backend``'s graph source and hands it to that
source (:meth:`envs.source.GraphSource.apply`: :mod:`envs.openvino.apply`,
:mod:`envs.pytorch.apply`), which, on an OpenVINO backend,
compiles the model with a placement on real devices, checks its outputs
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
(:mod:`envs.pytorch.saved`), which :func:`hsdag_ray.placed.load_placed` loads as well::

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
from pathlib import Path
from typing import Any, Optional, Sequence

from envs.backends import BACKENDS, get as get_backend
from envs.deploy import ApplyJob, SaveError
from envs.graph_backend import parse_placement
from envs.intervals import WITHIN_NOISE, interval_ms
from envs.timing import precision_words
from hsdag_ray.cli import RunError, UsageError, describe_devices, resolve_devices, run, writable_file
from hsdag_ray.flags import Parser, add_timing_args, timing_from_args
from hsdag_core.compgraph import parse_input_shapes
from hsdag_core.models import MODEL_HELP

__all__ = ["main", "apply"]

def modes() -> tuple[str, ...]:
    """The backends a placement is applied with (each through its graph source), as
    registered now."""
    return tuple(name for name, kind in BACKENDS.items() if kind.deploys)


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
    ap.add_argument("--backend", choices=modes(), default="auto",
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
    kind = get_backend(args.backend)
    names = resolve_devices(specs, timing.threads, args.backend)
    model, graph, _, _ = kind.graph.build(args.model, "none", parse_input_shapes(args.input_shape))
    placement = parse_placement(args.placement, graph, names)
    counts = Counter(placement.values())
    say(f"{args.model}: {graph.num_nodes} nodes; placement "
        + ", ".join(f"{d} {counts[d]}" for d in names if counts[d]))
    job = ApplyJob(args.model, args.placement, args.backend, specs, names,
                   describe_devices(specs, timing.threads, args.backend), model, graph, placement,
                   counts, timing, args.rounds, args.seed, args.save)
    try:
        return kind.graph.apply(job)
    except SaveError as exc:
        raise RunError(str(exc)) from None


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
        how = str(info.get("how") or info.get("path", ""))  # the source says how it ran
        if info.get("execution_devices"):
            how = f"on {','.join(info['execution_devices'])}"
        tab.add_row(row["name"], _ms(row["latency_s"]), interval_ms(row.get("interval_s")), _verdict(row), err, how,
                    style="bold" if row is result["placed"] else None)
    return tab


def _is_row(value: Any) -> bool:
    return isinstance(value, dict) and "name" in value and "ok" in value


def _rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The result's rows in table order: the placement, each device, then the graph source's
    own rows in the order it wrote them (OpenVINO: AUTO, HETERO's splits; torch: Accelerate)."""
    rows = [result["placed"], *result["single"].values()]
    for key, value in result.items():
        if key in ("placed", "single"):
            continue
        if _is_row(value):
            rows.append(value)
        elif isinstance(value, dict) and value and all(_is_row(v) for v in value.values()):
            rows.extend(value.values())
    return rows


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
        info = placed["info"]
        if placed["ok"] and "max_rel_error" in info:  # a source that checks outputs
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
