"""How often the interval of a timing stopped by the precision rule covers the true median.

    python bench/bench_coverage.py                  # 1000 seeded timings per noise level
    python bench/bench_coverage.py --draws 300 --sigmas 0.04

A one-node placement of 1 ms is timed by :class:`envs.noisy.NoisySimulatorBackend` (each
run 1 ms times a seeded lognormal draw of median 1, so the true median is 1 ms) with the
default rule: at least ``TimingConfig.repeats`` blocks, then blocks until the interval
is within ``TimingConfig.precision`` of the median, and blocks of one run so the noise
per block is ``--sigmas``. Printed per noise level and per level of the interval whose
width the rule judges (:data:`envs.racing.STOP_LEVEL`, and 0.95, stopping on the
reported interval itself): the share of reported 95% intervals that cover 1 ms, the
median blocks, and the share the cap stopped.
"""
from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np

import envs.racing as racing
from envs.base import TimingConfig
from envs.noisy import NoisySimulatorBackend
from hsdag_core.costgraph import CostGraph


def one_node() -> CostGraph:
    return CostGraph(names=["a"], devices=["X"], compute_s=np.array([[1e-3]]), tensor_src=[],
                     tensor_bytes=np.zeros(0), edge_src=[], edge_dst=[], edge_tensor=[],
                     boundary_s=0.0, name="one")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--sigmas", default="0.01,0.02,0.04,0.08")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    timing = replace(TimingConfig(), block=1, warmup=1, warmup_agree=0.0, race=False, precision_cap_s=1.0)
    chosen = racing.STOP_LEVEL
    print(f"{args.draws} timings each; at least {timing.repeats} blocks of 1 run, target "
          f"+/-{timing.precision:.0%}, cap {timing.precision_cap_s:g} s (1000 runs)")
    print(f"{'noise':>6}{'judged at':>11}{'coverage':>10}{'blocks':>8}{'capped':>8}")
    placement = np.zeros(1, np.int64)
    for sigma in (float(s) for s in args.sigmas.split(",") if s):
        for level in (0.95, chosen):
            racing.STOP_LEVEL = level
            backend = NoisySimulatorBackend(one_node(), timing, sigma=sigma, seed=args.seed)
            hits, blocks, capped = [], [], 0
            for _ in range(args.draws):
                m = backend.measure_array(placement)
                hits.append(m.interval_s[0] <= 1e-3 <= m.interval_s[1])
                blocks.append(m.runs)
                capped += m.info["precision"]["capped"]
            print(f"{sigma:>6.0%}{level:>11.0%}{np.mean(hits):>10.1%}{np.median(blocks):>8.0f}"
                  f"{capped / args.draws:>8.0%}", flush=True)
    racing.STOP_LEVEL = chosen
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
