"""Speed of real measurement: placements measured per second by the torch backend with its
stage cache and racing, on a stream like a converging search's (each placement flips a short
run of nodes of an incumbent that moves to the new placement one time in three), and where
the time goes: building stages, warm-up, or timed runs. Aim: 10 placements/s on a GPU."""
from __future__ import annotations

import time
from typing import Any, Optional

import numpy as np

from bench.gpu_check.common import graphs, say, timing, verdict

__all__ = ["speed", "lines", "judge", "AIM"]

AIM = 10.0


def _stream(n: int, count: int, seed: int, on_gpu: float) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    inc = (rng.random(n) < on_gpu).astype(np.int64)
    out = []
    for _ in range(count):
        p = inc.copy()
        a = int(rng.integers(0, n))
        p[a:a + int(rng.integers(1, max(2, n // 8)))] ^= 1
        out.append(p)
        if rng.random() < 1 / 3:
            inc = p
    return out


def speed(spec: str, gpu: str, count: int, on_gpu: float, precision: Optional[float] = None) -> dict[str, Any]:
    from envs.pytorch.backend import TorchBackend

    program, _, coarse = graphs(spec)
    backend = TorchBackend(coarse, program, ["cpu", gpu], timing(repeats=3, precision=precision))
    backend.measure_array(np.ones(coarse.num_nodes, np.int64))  # the stages' weights moved once
    parts = {"build": 0.0, "warm-up": 0.0, "timed runs": 0.0}
    t0 = time.perf_counter()
    for p in _stream(coarse.num_nodes, count, 0, on_gpu):
        m = backend.measure_array(p, race=True)
        parts["build"] += float(m.info.get("compile_s", 0.0))
        parts["warm-up"] += float(m.info.get("warmup_s", 0.0)) + float(m.info.get("first_run_s", 0.0))
        parts["timed runs"] += float(m.info.get("timed_s", 0.0))
    wall = time.perf_counter() - t0
    out = {"model": spec, "nodes": coarse.num_nodes, "placements": count, "seconds": wall,
           "per_second": count / wall, "parts_s": parts, "other_s": wall - sum(parts.values()),
           "limit": max(parts, key=parts.get)}
    say(f"speed {spec}: {out['per_second']:.1f} placements/s, limited by {out['limit']}")
    return out


def lines(figs: list[dict[str, Any]], gpu: str) -> list[str]:
    out = [f"## Speed of real measurement on cpu + {gpu}", "",
           "A converging search's stream, stage cache and racing on.", "",
           "| model | nodes | placements | placements/s | build | warm-up | timed runs | other | limited by |",
           "|---|---|---|---|---|---|---|---|---|"]
    for f in figs:
        w = f["seconds"]
        share = {k: v / w for k, v in f["parts_s"].items()}
        out.append(f"| {f['model']} | {f['nodes']} | {f['placements']} | {f['per_second']:.1f} | "
                   f"{share['build']:.0%} | {share['warm-up']:.0%} | {share['timed runs']:.0%} | "
                   f"{f['other_s'] / w:.0%} | {f['limit']} |")
    return out


def judge(figs: list[dict[str, Any]]) -> str:
    worst = min(f["per_second"] for f in figs)
    return verdict(worst >= AIM, f"at least {AIM:g} placements/s",
                   f"slowest {worst:.1f}/s, {worst / AIM:.0%} of the aim; limited by "
                   + ", ".join(f"{f['limit']} on {f['model']}" for f in figs))


def main() -> None:
    """``python -m bench.gpu_check.speed --gpu cpu:threads=1 resnet50:10:0.5 ...``: the speed
    section alone, for the models named (spec:placements:share on the device)."""
    import argparse
    import os

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gpu", default="cuda", help="the device beside cpu (cuda, or cpu:threads=1 without a GPU)")
    ap.add_argument("models", nargs="+", help="SPEC:PLACEMENTS:SHARE, e.g. resnet50:10:0.5")
    args = ap.parse_args()
    plan = []
    for item in args.models:
        spec, count, share = item.rsplit(":", 2)
        try:
            plan.append((spec, int(count), float(share)))
        except ValueError:
            ap.exit(2, f"{item!r} is not SPEC:PLACEMENTS:SHARE (e.g. resnet50:10:0.5)\n")
    figs = []
    for spec, count, share in plan:
        figs.append(speed(spec, args.gpu, count, share))
        say(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print("\n".join(lines(figs, args.gpu)))
    print(judge(figs))


if __name__ == "__main__":
    main()
