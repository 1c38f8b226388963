"""How a machine's speed drifts between consecutive runs of one placement.

    python bench/bench_drift.py                                   # ResNet-18 on both pairs
    python bench/bench_drift.py --models tv:resnet50 --pairs torch --runs 600

The precision rule (``--precision``) stops when the order-statistic interval of the
median block is tight. That interval assumes blocks that are independent draws; a machine
whose speed moves in spells of seconds (another tenant's load on the same host, clock
changes) breaks that, and no count of blocks within a few seconds can then reach 2%. This
bench shows whether that is the case: each model whole on the first device of each pair
(as ``bench/bench_precision.py`` places it, the backend built once), timed ``--runs``
times one run per block after the usual warm-up, and printed per row:

* the 5th, 50th and 95th percentile of one run's time (ms);
* the lag-1 autocorrelation of consecutive runs: near 0 for independent runs, near 1
  when the speed drifts in spells;
* the means of consecutive windows of ``--window`` runs (ms), the spells themselves.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import replace

import numpy as np

from bench.bench_precision import PAIRS, backend_for, graph_of
from envs.base import TimingConfig


def series(model: str, pair: str, runs: int) -> np.ndarray:
    """``runs`` consecutive timings (seconds) of ``model`` whole on ``pair``'s first device."""
    program, graph = graph_of(model, pair)
    timing = replace(TimingConfig(), block=1, repeats=runs, precision=0.0, timeout_s=max(600.0, runs))
    backend = backend_for(program, graph, pair, timing)
    m = backend.measure_array(np.zeros(graph.num_nodes, np.int64))
    if not m.ok:
        raise SystemExit(f"{model} on {pair} failed to run: {m.error}")
    return np.asarray(m.samples_s)


def lag1(x: np.ndarray) -> float:
    """The lag-1 autocorrelation of ``x``."""
    return float(np.corrcoef(x[:-1], x[1:])[0, 1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tv:resnet18")
    ap.add_argument("--pairs", default="torch,openvino", help=f"device pairs: {', '.join(PAIRS)}")
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--window", type=int, default=20)
    args = ap.parse_args(argv)
    if args.runs < 2 * args.window:
        ap.error("--runs must be at least twice --window")
    for model in [m for m in args.models.split(",") if m]:
        for pair in [p for p in args.pairs.split(",") if p]:
            load0 = os.getloadavg()[0]
            x = series(model, pair, args.runs) * 1e3
            p5, p50, p95 = np.percentile(x, [5, 50, 95])
            usable = len(x) // args.window * args.window
            windows = x[:usable].reshape(-1, args.window).mean(axis=1)
            print(f"{model} on {pair}: {len(x)} runs, ms p5 {p5:.1f} / median {p50:.1f} / p95 {p95:.1f}, "
                  f"lag-1 autocorrelation {lag1(x):.2f}, load {load0:.1f}-{os.getloadavg()[0]:.1f}")
            print(f"  means of {args.window} consecutive runs (ms): "
                  + " ".join(f"{w:.0f}" for w in windows), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
