"""Record a profile: ``python -m hsdag_ray.profile --model M --out p.json``.

Per-op times of every real device with OpenVINO's profiling, modeled devices
from their specs, and (two real devices) each device's op times scaled to the whole model
run on it, then transfer and boundary costs fitted to real split placements::

    python -m hsdag_ray.profile --model resnet50 --devices CPU,CPU_F32 --out r50.json
    python -m hsdag_ray.profile --model bert_base --devices CPU --modeled GPU_MODEL --out b.json
    # PyTorch devices (the torch backend's graph, per-node times with torch.fx)
    python -m hsdag_ray.profile --backend torch --model tv:resnet50 --devices cpu,cuda:0 --out r50t.json
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Optional, Sequence

from envs.profiling import record
from envs.backends import BACKENDS, get as get_backend
from hsdag_ray.cli import UsageError, resolve_devices, run, writable_file
from hsdag_ray.flags import Parser, add_timing_args, timing_from_args
from hsdag_core.compgraph import parse_input_shapes
from hsdag_core.models import MODEL_HELP
from hsdag_core.device_profile import MODELED_DEVICES

__all__ = ["main"]


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = Parser(prog="python -m hsdag_ray.profile", description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help=MODEL_HELP)
    ap.add_argument("--devices", default=None,
                    help="real or virtual devices to profile, comma-separated (default CPU; with "
                         "--backend torch: cpu)")
    ap.add_argument("--backend", choices=[n for n, k in BACKENDS.items() if k.real], default="auto",
                    help="whose devices and graph are profiled: auto, hetero or pipeline: OpenVINO "
                         "devices and graph; torch: PyTorch devices (cpu, cpu:bf16, "
                         "cuda:N[:mem=SIZE]) and the torch.export graph (default auto)")
    ap.add_argument("--modeled", default="",
                    help=f"modeled devices to add, comma-separated ({', '.join(MODELED_DEVICES)})")
    ap.add_argument("--fit", type=int, default=12,
                    help="real split placements measured to fit transfer and boundary costs, "
                         "after the model is measured on each device alone to scale its op "
                         "times (needs two real devices; 0 = skip both; default 12)")
    ap.add_argument("--input-shape", help="static input shape(s) for a dynamic file model")
    ap.add_argument("--out", required=True, help="profile JSON to write")
    add_timing_args(ap)
    args = ap.parse_args(argv)
    timing = timing_from_args(args)
    # default: the backend's first default device (the CPU)
    specs = [d for d in (args.devices or get_backend(args.backend).default_devices[0]).split(",") if d]
    modeled = [d for d in args.modeled.split(",") if d]
    bad = [d for d in modeled if d not in MODELED_DEVICES]
    if bad:
        raise UsageError(f"unknown modeled device {bad[0]!r}; choose among {', '.join(MODELED_DEVICES)}")
    if len(set(specs + modeled)) < 2:
        raise UsageError(f"--devices and --modeled name only {', '.join(specs + modeled) or 'no device'}, "
                         "and a profile is for placing over two or more devices; add one (e.g. "
                         "--modeled GPU_MODEL)")
    if specs:
        resolve_devices(specs, timing.threads, args.backend)
    writable_file(args.out)  # refused before anything is recorded
    t0 = time.perf_counter()
    prof = record(args.model, specs, modeled, args.fit, timing, parse_input_shapes(args.input_shape),
                  progress=sys.stderr.isatty(), backend=args.backend)
    prof.save(args.out)
    for name, d in prof.devices.items():
        total = sum(prof.op_time_s[name].values())
        print(f"{name}: {d['kind']}, sum of op times {total * 1e3:.3f} ms")
    for name, scale in (prof.fit.get("compute_scale") or {}).items():
        print(f"{name}: op times scaled by {scale:.2f} to the whole model run on it")
    if prof.fit.get("placements"):
        f = prof.fit
        print(f"fitted on {f['placements']} real placements: boundary {f['boundary_s'] * 1e3:.3f} ms, "
              f"link latency {f['link_latency_s'] * 1e6:.1f} us, mean error {f['mean_rel_error']:.1%}, "
              f"Spearman {f['spearman_fitted']:.2f} (compute only {f['spearman_compute_only']:.2f})")
    print(f"wrote {args.out} in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(run(main, prog="hsdag_ray.profile"))
