"""What racing costs in fidelity: racing rules replayed on the same recorded timings.

    python bench/bench_racing.py                                  # resnet50, converging + cold
    python bench/bench_racing.py --models bert_base --load 2      # on a machine made busy

Racing (:mod:`envs.racing`) saves runs by deciding early; a wrong
early decision costs the learner a reward (a placement as fast as the best
reported slower) and, worst, a lost new best. Live benchmarks
(``bench/bench_measure.py``) show the speed; they cannot show the wrong
decisions, since a raced placement is never timed in full. Here every
placement of a stream (``bench_measure``'s ``cold`` and ``converging``
streams) is timed run by run, ``--runs`` runs each (the first
``TimingConfig.warmup`` of them are the warm-up runs), once; then each racing
setting is replayed on these recorded runs with the project's own decisions
(:func:`~envs.racing.far_slower`, :func:`~envs.racing.race_step`),
so every setting sees exactly the same timings. A placement's *full* latency is
the median of all its recorded blocks.

Printed per setting: timed and warm-up runs per placement (besides the run
that follows every compile), and against the first setting;
placements cut short (stopped or settled), those cut short although their full
latency was within 2% of the best of the moment (``near``) or below it
(``lost``: a new best missed), the chosen best's full latency over the
stream's fastest, and the median relative error of the reported latencies of
the placements not stopped. A close new best asking for more blocks than were
recorded is charged the runs it asked for and judged on the recorded ones.

``--load N`` starts N busy processes that switch between spinning and
sleeping at random (tenths of a second each) while the runs are recorded, as
other jobs on a shared machine do; they are stopped afterwards.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import time
from dataclasses import replace

import numpy as np

from bench.bench_measure import cold_stream, converging_stream
from envs.base import TimingConfig
from envs.openvino.node_backend import OpenVINOGraphBackend
from envs.racing import far_slower, race_step
from hsdag_core.coarsening import build_graph

#: the settings replayed; the first is the yardstick, the last today's default
SETTINGS = {
    "no racing": dict(race=False),
    "race, 2 blocks": dict(race_far=0, race_min_blocks=2, race_settle=0),
    "+far stop": dict(race_min_blocks=2, race_settle=0),
    "+1 block": dict(race_settle=0),
    "+settle (default)": dict(),
}


def busy(seed: int) -> None:
    """Spin and sleep at random, for ever (a shared machine's other jobs)."""
    rng = random.Random(seed)
    while True:
        end = time.perf_counter() + rng.uniform(0.05, 0.6)
        while time.perf_counter() < end:
            pass
        time.sleep(rng.uniform(0.05, 0.8))


def record(graph, model, devices: list[str], stream: list[np.ndarray], runs: int) -> list[list[float]]:
    """Every placement of ``stream`` timed run by run (``runs`` runs, no racing)."""
    backend = OpenVINOGraphBackend(graph, model, devices, "pipeline",
                                   TimingConfig(warmup=0, repeats=runs, block=1, race=False))
    traces = []
    for p in stream:
        m = backend.measure({nm: devices[int(d)] for nm, d in zip(graph.names, p)})
        if m.ok:
            traces.append(list(m.samples_s))
    return traces


def blocks(runs: list[float], timing: TimingConfig) -> list[float]:
    timed = runs[timing.warmup:]
    return [float(np.mean(timed[i:i + timing.block])) for i in range(0, len(timed) - timing.block + 1, timing.block)]


def replay(traces: list[list[float]], timing: TimingConfig) -> dict:
    """Race every recorded placement in turn against the best so far, as ``time_runs`` does."""
    best = None
    cost, cut, near, lost, errors, kept = 0, 0, 0, 0, [], []
    for runs in traces:
        recorded = blocks(runs, timing)
        full = float(np.median(recorded))
        warm = runs[timing.warmup - 1] if timing.warmup else None
        cost += timing.warmup
        reference = best if timing.race else None
        if timing.warmup and far_slower(warm, reference, timing):
            latency, decision, samples = warm, "stop", []
        else:
            samples: list[float] = []
            decision = race_step(samples, reference, timing, warm)
            while decision in ("go", "more"):
                cost += timing.block
                if len(samples) < len(recorded):
                    samples.append(recorded[len(samples)])
                else:  # asked for more than was recorded: charged, judged on what there is
                    samples.append(recorded[len(samples) % len(recorded)])
                decision = race_step(samples, reference, timing, warm, sum(samples) * timing.block)
            latency = float(np.median(samples))
        if decision in ("stop", "settled"):
            cut += 1
            near += full < best * 1.02
            lost += full < best
        if decision != "stop":
            errors.append(abs(latency - full) / full)
            kept.append((latency, full))
            best = latency if best is None else min(best, latency)
    fastest = min(float(np.median(blocks(r, timing))) for r in traces)
    chosen = min(kept)[1]
    return dict(runs=cost / len(traces), cut=cut, near=near, lost=lost, chosen=chosen / fastest,
                error=float(np.median(errors)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet50")
    ap.add_argument("--devices", default="CPU,CPU_F32")
    ap.add_argument("--streams", default="converging,cold")
    ap.add_argument("--placements", type=int, default=60, help="placements per stream")
    ap.add_argument("--runs", type=int, default=26, help="runs recorded per placement (warm-up included)")
    ap.add_argument("--load", type=int, default=0, help="busy processes while recording (0 = none)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    streams = {"cold": cold_stream, "converging": converging_stream}
    unknown = sorted(set(args.streams.split(",")) - set(streams))
    if unknown:
        ap.error(f"unknown stream(s) {', '.join(unknown)}; choose from cold, converging")
    devices = args.devices.split(",")
    default = TimingConfig()
    print(f"devices {args.devices}, {args.runs} runs recorded per placement, load {args.load}; default: "
          f"{default.warmup} warm-up + {default.repeats}x{default.block} runs, margin {default.race_margin:.0%}")
    print(f"{'model':<11}{'stream':<12}{'setting':<19}{'runs/placement':>15}{'ratio':>7}{'cut':>5}{'near':>6}"
          f"{'lost':>6}{'chosen/fastest':>16}{'error':>8}")
    for model_name in args.models.split(","):
        model, _, graph, _ = build_graph(model_name, "colocation")
        for stream_name in args.streams.split(","):
            stream = streams[stream_name](graph.num_nodes, args.placements, args.seed)
            hogs = [mp.Process(target=busy, args=(args.seed * 100 + i,), daemon=True) for i in range(args.load)]
            for h in hogs:
                h.start()
            try:
                traces = record(graph, model, devices, stream, args.runs)
            finally:
                for h in hogs:
                    h.terminate()
            yardstick = None
            for name, kw in SETTINGS.items():
                r = replay(traces, replace(default, **kw))
                yardstick = yardstick or r["runs"]
                print(f"{model_name:<11}{stream_name:<12}{name:<19}{r['runs']:>15.1f}{r['runs'] / yardstick:>7.2f}"
                      f"{r['cut']:>5}{r['near']:>6}{r['lost']:>6}{r['chosen']:>16.4f}{r['error']:>8.2%}")


if __name__ == "__main__":
    main()
