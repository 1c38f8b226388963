"""How precise a re-measured timing is: the half-width of its 95% interval over its median.

    python bench/bench_spread.py                                   # tv:resnet50 on cpu + cpu:bf16
    python bench/bench_spread.py --model tiny_cnn --rounds 3

Whole-model placements (each device alone) and contiguous splits of the torch backend are
re-measured in ``--rounds`` interleaved rounds (:func:`envs.measuring_service.remeasure`: round
``r`` times every placement once, in an order rotated from round to round, so drifts of a
shared machine hit all alike), each round ``--repeats`` blocks of ``--block`` runs after a
warm-up that lasts until two runs agree. Printed per placement: the median, its 95%
interval (:mod:`envs.intervals`, the rounds' blocks pooled), the half-width over the
median against ``--target`` (2%), and each pair of placements compared (faster only when
the intervals do not overlap). Imports neither OpenVINO nor Ray.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from envs.base import TimingConfig
from envs.intervals import compare
from envs.measuring_service import remeasure


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tv:resnet50")
    ap.add_argument("--devices", default="cpu,cpu:bf16")
    ap.add_argument("--splits", default="0.5", help="split fractions, comma-separated")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--block", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads (0: torch's default)")
    ap.add_argument("--target", type=float, default=0.02)
    args = ap.parse_args(argv)
    import torch

    from envs.pytorch.backend import TorchBackend
    from envs.backends import build_graph

    program, _, graph, _ = build_graph(args.model, "colocation", None, "torch")
    devices = args.devices.split(",")
    timing = TimingConfig(warmup=2, repeats=args.repeats, block=args.block, threads=args.threads,
                          timeout_s=600.0)
    backend = TorchBackend(graph, program, devices, timing)
    n = graph.num_nodes
    cands = {f"all {d}": np.full(n, i, np.int64) for i, d in enumerate(devices)}
    for f in (float(x) for x in args.splits.split(",") if x):
        cut = int(round(f * n))
        cands[f"split {f:g} ({devices[0]} first)"] = np.array([0] * cut + [1] * (n - cut), np.int64)
    t0 = time.perf_counter()
    out = remeasure(lambda p: backend.measure_array(p).to_dict(), cands, rounds=args.rounds)
    wall = time.perf_counter() - t0
    print(f"{args.model}: {n} nodes on {args.devices}, {torch.get_num_threads()} threads; "
          f"{args.rounds} interleaved rounds of {args.repeats} blocks x {args.block} runs; {wall:.0f} s")
    print(f"{'placement':<28}{'median ms':>10}{'95% interval ms':>20}{'half-width':>12}  target {args.target:.0%}")
    for name, row in out.items():
        if not row["ok"]:
            print(f"{name:<28} failed: {row['error']}")
            continue
        lo, hi = row["interval_s"]
        hw = row["half_width"]
        print(f"{name:<28}{row['latency_s'] * 1e3:>10.2f}{f'{lo * 1e3:.2f}-{hi * 1e3:.2f}':>20}"
              f"{hw:>12.1%}  {'met' if hw <= args.target else f'not met ({hw / args.target:.1f}x)'}")
    names = [k for k, r in out.items() if r["ok"]]
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            word = compare(out[a]["interval_s"], out[b]["interval_s"])
            print(f"  {a} vs {b}: {word}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
