"""How often a default timing reaches its precision, and what it costs: ``measure`` calls.

    python bench/bench_precision.py                                  # the defaults against the old 7 blocks
    python bench/bench_precision.py --models tv:resnet18 --pairs torch --calls 3 \\
        --settings default,threads2,block1,warmup6,old                # what each setting changes

Each model is placed whole on the first device of each device pair (``torch``: ``cpu`` +
``cpu:bf16``; ``openvino``: ``CPU`` + ``CPU_F32``; ``--placement split`` puts the first
half of the nodes on the first device and the rest on the second) and measured ``--calls``
times as ``python -m hsdag_ray.measure`` does (the backend built once, so a call is its
timing only: warm-up and timed blocks). Printed per setting: how many calls reached the
precision target (the 95% interval of the median within ``--target`` of it), the median
seconds per call, the median half-width reached, how many calls the time cap stopped, and
the machine's load (1-minute load average) before and after the row. The settings:

* ``default``: ``TimingConfig()``, what every command uses;
* ``old``: the earlier default, a fixed 7 blocks of 3 runs (``precision=0``);
* ``threads1``, ``threads2``, ``block1``, ``block3``, ``warmup6``: the default with 1 or 2
  threads per device, blocks of 1 or always 3 runs (the default's before ``block_s``), or 6
  fixed warm-up runs (no early end of the warm-up).
"""
from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace

import numpy as np

from envs.base import TimingConfig

#: the settings compared, as changes to the default
SETTINGS = {
    "default": {},
    "old": {"repeats": 7, "block": 3, "block_s": 0.0, "precision": 0.0},
    "threads1": {"threads": 1},
    "threads2": {"threads": 2},
    "block1": {"block": 1},
    "block3": {"block": 3, "block_s": 0.0},
    "warmup6": {"warmup": 6, "warmup_agree": 0.0},
}
PAIRS = {"torch": ("torch", ["cpu", "cpu:bf16"]), "openvino": ("auto", ["CPU", "CPU_F32"])}


def graph_of(model: str, pair: str):
    """The model (program or OpenVINO model) and graph of ``model`` for ``pair``."""
    from envs.backends import graph_source

    program, _, graph, _ = graph_source(PAIRS[pair][0]).build(model, "none", None)
    return program, graph


def backend_for(program, graph, pair: str, timing: TimingConfig):
    """The backend of ``pair`` timing with ``timing`` (as ``measure`` makes it)."""
    from envs.graph_backend import make_backend
    from hsdag_ray.cli import resolve_devices

    kind, devices = PAIRS[pair]
    names = resolve_devices(devices, timing.threads, kind)
    return make_backend(kind, graph, program, names, timing, None, "sequential")


def one_row(backend, placement: np.ndarray, calls: int, target: float) -> dict:
    """``calls`` measurements of ``placement`` after one untimed (it compiles): the calls
    within ``target``, the median seconds per call and half-width, the calls capped."""
    backend.measure_array(placement)
    secs, widths, capped, failed = [], [], 0, 0
    load0 = os.getloadavg()[0]
    for _ in range(calls):
        start = time.perf_counter()
        m = backend.measure_array(placement)
        secs.append(time.perf_counter() - start)
        if not m.ok:
            failed += 1
            continue
        widths.append(m.half_width)
        capped += bool((m.info.get("precision") or {}).get("capped"))
    return {"reached": sum(w <= target for w in widths), "calls": calls, "failed": failed,
            "median_s": float(np.median(secs)), "half_width": float(np.median(widths)) if widths else None,
            "capped": capped, "load": (load0, os.getloadavg()[0])}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tv:resnet18,tv:resnet50,hf:gpt2:n_layer=4:seq=32")
    ap.add_argument("--pairs", default="torch,openvino", help="device pairs: torch, openvino")
    ap.add_argument("--settings", default="default,old", help=f"of {', '.join(SETTINGS)}")
    ap.add_argument("--placement", choices=("first", "split"), default="first")
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--target", type=float, default=TimingConfig().precision)
    args = ap.parse_args(argv)
    settings = [s for s in args.settings.split(",") if s]
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown:
        ap.error(f"unknown setting {unknown[0]}; choose from {', '.join(SETTINGS)}")
    base = TimingConfig()
    print(f"{os.cpu_count()} CPUs; default timing: warm-up {base.warmup} (until two runs agree within "
          f"{base.warmup_agree:.0%}, at most {base.warmup_max}), at least {base.repeats} blocks of "
          f"{base.block} runs (fewer where a block would last over {base.block_s:g} s), {base.threads} thread(s) per device, target +/-{args.target:.0%}, cap "
          f"{base.precision_cap_s:g} s; placement: {args.placement}")
    print(f"{'model':<34}{'pair':<10}{'setting':<10}{'within':>8}{'median s':>10}{'half-width':>12}"
          f"{'capped':>8}{'load':>12}")
    for model in [m for m in args.models.split(",") if m]:
        for pair in [p for p in args.pairs.split(",") if p]:
            program, graph = graph_of(model, pair)
            n = graph.num_nodes
            placement = (np.zeros(n, np.int64) if args.placement == "first"
                         else np.array([0] * (n // 2) + [1] * (n - n // 2), np.int64))
            for name in settings:
                backend = backend_for(program, graph, pair, replace(base, **SETTINGS[name]))
                r = one_row(backend, placement, args.calls, args.target)
                hw = "-" if r["half_width"] is None else f"{r['half_width']:.1%}"
                print(f"{model:<34}{pair:<10}{name:<10}{r['reached']:>5}/{r['calls']:<2}"
                      f"{r['median_s']:>10.2f}{hw:>12}{r['capped']:>8}"
                      f"{r['load'][0]:>6.1f}-{r['load'][1]:<5.1f}"
                      + (f" ({r['failed']} failed)" if r["failed"] else ""), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
