"""Measure one placement of a model: ``python -m hsdag_ray.measure``.

Examples::

    # everything on the CPU (bf16 here), then a half/half split with an f32 CPU device
    python -m hsdag_ray.measure --model resnet50 --devices CPU,CPU_F32 --placement all:CPU
    python -m hsdag_ray.measure --model resnet50 --devices CPU,CPU_F32 --placement split:0.5
    # a placement file (op name -> device), through the stage pipeline, as JSON
    python -m hsdag_ray.measure --model resnet50 --devices CPU,CPU_F32 \\
        --placement runs/x/best_placement.json --backend pipeline --json
    # the simulator on a recorded profile
    python -m hsdag_ray.measure --model resnet50 --backend simulator --profile r50.json \\
        --placement random:0
    # PyTorch devices (a model exported with torch.export; a CUDA GPU capped at 2 GB)
    python -m hsdag_ray.measure --model tv:resnet50 --backend torch --devices cpu,cuda:0:mem=2GB \
        --placement split:0.5 --validate
    # the trivial baseline: OpenVINO's AUTO device picks one real device for the whole model
    python -m hsdag_ray.measure --model resnet50 --devices CPU,CPU_F32 --placement auto

Devices are OpenVINO names (``CPU``, ``GPU``...) or virtual devices made from a
second instance of the CPU plugin (``CPU_F32``, or ``NAME=CPU:precision=f32``);
the output says which is which. ``--placement auto`` compiles the whole model
on OpenVINO's AUTO device over the real devices behind ``--devices`` (virtual
CPU devices count as ``CPU``: ``AUTO:CPU`` here, ``AUTO:GPU,CPU`` with a GPU)
and says which device AUTO executed on.

The latency is the median of timed blocks: at least ``--repeats``, then more until the
95% interval of the median is within ``--precision`` of it (2% by default), or until
``--precision-cap-s`` seconds of blocks; the output says the precision reached, and when
the cap stopped it short (``precision`` in the JSON).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Optional, Sequence

from envs.backends import get as get_backend, graph_source, objective_error
from envs.graph_backend import BACKENDS, make_backend, parse_placement
from envs.simulator import OBJECTIVES
from envs.timing import precision_words
from hsdag_ray.cli import UsageError, describe_devices, resolve_devices, run
from hsdag_ray.flags import Parser, add_timing_args, timing_from_args
from hsdag_ray.run.resolve import default_devices
from hsdag_core.coarsening import COARSENINGS
from hsdag_core.compgraph import parse_input_shapes
from hsdag_core.models import MODEL_HELP

__all__ = ["main"]


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = Parser(prog="python -m hsdag_ray.measure", description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help=MODEL_HELP)
    ap.add_argument("--devices", default=None,
                    help="comma-separated devices (default CPU,CPU_F32; with --backend torch "
                         "cpu,cpu:bf16, or e.g. cpu,cuda:0:mem=2GB); with the simulator: "
                         "devices of the profile to use (default all)")
    ap.add_argument("--placement", default="all:CPU",
                    help="placement file (op name -> device) or all:DEVICE, split:F, random:SEED, "
                         "or auto (the whole model on OpenVINO's AUTO device over the real devices "
                         "behind --devices) (default all:CPU)")
    ap.add_argument("--backend", choices=BACKENDS, default="auto",
                    help="auto (HETERO, stage pipeline if HETERO fails), hetero, pipeline, simulator, "
                         "torch (PyTorch devices: cpu, cpu:bf16, cuda:N)")
    ap.add_argument("--profile", help="profile JSON for --backend simulator")
    ap.add_argument("--objective", default="sequential",
                    choices=OBJECTIVES,
                    help="sequential: the latency of one inference (default); throughput: a "
                         "pipeline's time per sample (simulator, torch); parallel: independent "
                         "stages at once (simulator); latency: Tarnawski et al.'s latency model "
                         "(simulator)")
    ap.add_argument("--coarsen", choices=COARSENINGS, default="none",
                    help="graph the shorthand placements are made on (default none)")
    ap.add_argument("--input-shape", help="static input shape(s) for a dynamic file model")
    ap.add_argument("--validate", action="store_true",
                    help="also check the outputs equal the unsplit model's")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    add_timing_args(ap)
    args = ap.parse_args(argv)

    timing = timing_from_args(args, args.validate)
    unmeasured = objective_error(args.backend, args.objective)
    if unmeasured:
        raise UsageError(unmeasured)
    auto = args.placement.lower() == "auto"  # not a backend name: the placement keyword
    kind = get_backend(args.backend)
    if auto and not kind.auto_device:
        raise UsageError(f"--placement auto compiles the whole model on OpenVINO's AUTO device "
                         f"over real devices, which --backend {args.backend} does not; leave out "
                         "--backend, or give all:DEVICE, split:F, random:SEED or a placement file")
    specs = [d for d in (args.devices or "").split(",") if d]
    profile = None
    described: list[str] = []
    if kind.simulated:
        from hsdag_core.device_profile import Profile

        if not args.profile:
            raise UsageError(f"--backend {args.backend} needs --profile FILE (record one with "
                             "python -m hsdag_ray.profile)")
        profile = Profile.load(args.profile)
        names = specs or profile.device_names
        absent = [d for d in names if d not in profile.devices]
        if absent:
            raise UsageError(f"device {absent[0]} is not in the profile {args.profile} (it has "
                             f"{', '.join(profile.device_names)}); name devices of the profile in "
                             "--devices, or record one with python -m hsdag_ray.profile")
        described = [f"{d}: {'modeled' if profile.is_modeled(d) else 'measured'} (profile {args.profile})"
                     for d in names]
    else:
        specs = specs or default_devices(args.backend)
        names = resolve_devices(specs, timing.threads, args.backend)
        described = describe_devices(specs, timing.threads, args.backend)
    source = graph_source(args.backend, profile.source if profile is not None else "")
    model, _, graph, _ = source.build(args.model, args.coarsen, parse_input_shapes(args.input_shape))
    if auto:
        from envs.openvino.auto import AUTO_BACKEND, measure_auto

        backend_name = AUTO_BACKEND
        m = measure_auto(model, specs, timing)
        counts = Counter({str(m.info.get("auto_device", "AUTO")): graph.num_nodes})
    else:
        placement = parse_placement(args.placement, graph, names)
        backend = make_backend(args.backend, graph, model, names, timing, profile, args.objective)
        backend_name = backend.name
        m = backend.measure(placement)
        counts = Counter(placement.values())
    if args.json:
        out = {"model": args.model, "backend": backend_name, "devices": described,
               "nodes_per_device": dict(counts), "latency_s": m.latency_s if m.ok else None,
               "interval_s": m.interval_s, "precision": m.info.get("precision"),
               "measurement": m.to_dict()}
        print(json.dumps(out, indent=1))
    else:
        for line in described:
            print(f"device {line}")
        if auto:
            print(f"model {args.model}: {graph.num_nodes} nodes; placement: the whole model on "
                  f"{m.info.get('auto_device', 'AUTO')}, where OpenVINO picks the device")
        else:
            print(f"model {args.model}: {graph.num_nodes} nodes; placement "
                  + ", ".join(f"{d} {c}" for d, c in counts.items()))
        if m.ok:
            path = m.info.get("path", "")
            stages = m.info.get("stages")
            if auto:
                ran_on = m.info.get("execution_devices")
                path = (f"{m.info['auto_device']} executed on {', '.join(ran_on)}" if ran_on
                        else f"{m.info['auto_device']}, execution device not reported by OpenVINO")
            interval = (f"{m.interval_level:.0%} interval {m.interval_s[0] * 1e3:.3f}-"
                        f"{m.interval_s[1] * 1e3:.3f} ms, " if m.interval_s else "")
            print(f"latency {m.latency_s * 1e3:.3f} ms (median of {len(m.samples_s)} samples, "
                  f"{interval}{m.runs} runs) via {backend_name}"
                  + (f" [{path}]" if path else "") + (f", {stages} stage(s)" if stages else ""))
            words = precision_words(m.info)
            if words:
                print(f"precision {words}")
        else:
            print(f"FAILED at {m.stage}: {m.error}")
    return 0 if m.ok else 1


if __name__ == "__main__":
    sys.exit(run(main, prog="hsdag_ray.measure"))
