"""Placements measured per second on real OpenVINO, with and without the compiled-stage cache and racing.

    python bench/bench_measure.py                               # resnet50 and bert_base, CPU + CPU_F32
    python bench/bench_measure.py --models tiny_cnn --placements 20

For each model (placement graph coarsened as in training, ``colocation``) two
streams of distinct placements are measured:

* ``cold``: unrelated placements (contiguous splits, blocks, random per
  node), as an untrained policy proposes;
* ``converging``: a replayed local search around a moving incumbent (each
  placement flips a short run of nodes of the incumbent, which moves to the
  new placement one time in three), as a converging policy proposes: most
  placements share most stages with earlier ones.

Each placement of a stream is measured by three backends in turn, so drifts
of a shared machine hit all alike: ``old`` (no cache, no racing: the
behaviour before), ``cache`` (compiled-stage cache), ``cache+race`` (cache
and racing against the best so far, at least two timed blocks a placement),
``+far-stop`` (the same, and a placement whose last warm-up run is more than
twice the best is not timed further), ``+settle`` (the training loop's
default: a placement may stop after one block when that block and its last
warm-up run are both more than the margin slower than the best, and one whose
fastest of three blocks is still slower than the best is finished there, with
their median: ``race_min_blocks=1, race_settle=3`` against ``2, 0``). Printed:
placements per second of each, the speed-up over ``old``, and for each
setting its best placement re-measured ``--rounds`` times in full (as a run's
end does), its median with the half-width of its 95% interval over the median
(:mod:`envs.intervals`, the rounds' blocks pooled).
With ``--overlap`` it also times the best placement while another thread
compiles, to show whether compiling the next placement during timing would
disturb the timings.

``--backend torch`` measures the same streams on the torch backend instead (the model
exported with ``torch.export``, placements split into torch stages on ``--devices``,
default ``cpu,cpu:bf16``; ``cache`` is then the built-stage cache, and parameters are
moved to a device once in every setting), importing neither OpenVINO nor Ray;
``--backend both`` prints the torch rows next to OpenVINO's on the same model
(OpenVINO on ``--devices``, default ``CPU,CPU_F32``, torch on ``--torch-devices``), the
OpenVINO rows only where OpenVINO is importable::

    python bench/bench_measure.py --backend torch --models tiny_cnn --devices cpu,cpu:bf16
    python bench/bench_measure.py --backend both --models tiny_cnn --placements 12
"""
from __future__ import annotations

import argparse
import importlib.util
import threading
import time

import numpy as np

from envs.base import TimingConfig
from envs.intervals import interval_fields
from envs.openvino.node_backend import OpenVINOGraphBackend
from envs.backends import build_graph

#: the settings compared; the last is today's default (TimingConfig())
SETTINGS = {
    "old": dict(stage_cache=0, race=False),
    "cache": dict(race=False),
    "cache+race": dict(race_far=0, race_min_blocks=2, race_settle=0),
    "+far-stop": dict(race_min_blocks=2, race_settle=0),
    "+settle": dict(),
}


def cold_stream(n: int, count: int, seed: int) -> list[np.ndarray]:
    """Unrelated placements: a third contiguous splits, a third blocks, a third random per node."""
    rng = np.random.default_rng(seed)
    out: list[np.ndarray] = []
    while len(out) < count:
        kind = len(out) % 3
        if kind == 0:
            p = (np.arange(n) >= rng.integers(1, n)).astype(np.int64)
        elif kind == 1:
            p = ((np.arange(n) // rng.integers(2, max(3, n // 3)) + rng.integers(0, 2)) % 2).astype(np.int64)
        else:
            p = rng.integers(0, 2, n)
        out.append(p if rng.random() < 0.5 else 1 - p)
    return out


def converging_stream(n: int, count: int, seed: int) -> list[np.ndarray]:
    """Distinct placements of a local search: flip 1-4 consecutive nodes of a moving incumbent."""
    rng = np.random.default_rng(seed)
    incumbent = (np.arange(n) >= n // 2).astype(np.int64)
    seen = {incumbent.tobytes()}
    out = [incumbent.copy()]
    while len(out) < count:
        p = incumbent.copy()
        start = int(rng.integers(0, n))
        p[start:start + int(rng.integers(1, 5))] ^= 1
        if p.tobytes() in seen:
            continue
        seen.add(p.tobytes())
        out.append(p)
        if rng.random() < 1 / 3:
            incumbent = p
    return out


def run_stream(backends: dict, graph, stream: list[np.ndarray], devices: list[str]) -> dict:
    """Measure ``stream`` with every backend in turn; seconds, bests and counts per setting."""
    spent = {k: 0.0 for k in backends}
    best: dict[str, tuple[float, np.ndarray]] = {}
    stopped = {k: 0 for k in backends}
    failed = {k: 0 for k in backends}
    for p in stream:
        placement = {nm: devices[int(d)] for nm, d in zip(graph.names, p)}
        for name, backend in backends.items():
            t0 = time.perf_counter()
            m = backend.measure(placement, race=True)
            spent[name] += time.perf_counter() - t0
            if not m.ok:
                failed[name] += 1
                continue
            stopped[name] += m.info.get("raced") in ("stopped", "settled")
            if m.info.get("raced") != "stopped" and (name not in best or m.latency_s < best[name][0]):
                best[name] = (m.latency_s, p)
    return {"spent": spent, "best": best, "stopped": stopped, "failed": failed}


def remeasure(backend, graph, p: np.ndarray, devices: list[str], rounds: int) -> tuple[float, float]:
    """Median and half-width of the 95% interval over the median (:mod:`envs.intervals`) of
    ``rounds`` full timings of a placement, their blocks pooled."""
    placement = {nm: devices[int(d)] for nm, d in zip(graph.names, p)}
    samples = [t for _ in range(rounds) for t in backend.measure(placement).samples_s]
    fields = interval_fields(samples)
    return fields["median_s"], fields["half_width"]


def overlap(backend, graph, p: np.ndarray, devices: list[str], rounds: int) -> tuple[float, float]:
    """Median latency of ``p`` alone and while another thread compiles the whole model."""
    placement = {nm: devices[int(d)] for nm, d in zip(graph.names, p)}
    alone = [backend.measure(placement).latency_s for _ in range(rounds)]
    stop = threading.Event()

    def compile_loop() -> None:
        core = backend.ov.device_set.core
        while not stop.is_set():
            core.compile_model(backend.ov.model, devices[-1])

    worker = threading.Thread(target=compile_loop, daemon=True)
    worker.start()
    try:
        busy = [backend.measure(placement).latency_s for _ in range(rounds)]
    finally:
        stop.set()
        worker.join()
    return float(np.median(alone)), float(np.median(busy))


def torch_backends(model_name: str, coarsen: str, devices: list[str]):
    """The torch program's graph and a :class:`~envs.pytorch.backend.TorchBackend` maker
    per timing setting (imports torch, not OpenVINO)."""
    from envs.pytorch.backend import TorchBackend

    program, _, graph, _ = build_graph(model_name, coarsen, None, "torch")
    return graph, lambda timing: TorchBackend(graph, program, devices, timing)


def openvino_backends(model_name: str, coarsen: str, devices: list[str], mode: str):
    """The OpenVINO model's graph and an :class:`OpenVINOGraphBackend` maker per setting."""
    model, _, graph, _ = build_graph(model_name, coarsen)
    return graph, lambda timing: OpenVINOGraphBackend(graph, model, devices, mode, timing)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet50,bert_base")
    ap.add_argument("--backend", choices=("openvino", "torch", "both"), default="openvino",
                    help="openvino (default), torch (PyTorch devices, no OpenVINO needed), or both "
                         "side by side")
    ap.add_argument("--devices", default=None,
                    help="devices of the backend (default CPU,CPU_F32; with --backend torch "
                         "cpu,cpu:bf16; with both: OpenVINO's)")
    ap.add_argument("--torch-devices", default="cpu,cpu:bf16",
                    help="the torch backend's devices with --backend both (default cpu,cpu:bf16)")
    ap.add_argument("--coarsen", default="colocation")
    ap.add_argument("--placements", type=int, default=30, help="placements per stream")
    ap.add_argument("--mode", default="pipeline", help="OpenVINO backend mode (pipeline, auto, hetero)")
    ap.add_argument("--rounds", type=int, default=5, help="full re-measurements of each setting's best")
    ap.add_argument("--overlap", action="store_true", help="also time the best while another thread compiles")
    ap.add_argument("--streams", default="cold,converging", help="streams measured, comma-separated")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    unknown = sorted(set(args.streams.split(",")) - {"cold", "converging"})
    if unknown:
        ap.error(f"--streams takes cold and converging, not {', '.join(unknown)}")
    # (label, devices) of each backend compared; OpenVINO only where it is importable
    kinds: list[tuple[str, list[str]]] = []
    if args.backend in ("openvino", "both"):
        if args.backend == "openvino" or importlib.util.find_spec("openvino") is not None:
            kinds.append(("openvino", (args.devices or "CPU,CPU_F32").split(",")))
        else:
            print("OpenVINO is not importable here: the torch backend alone")
    if args.backend in ("torch", "both"):
        torch_devs = args.devices if args.backend == "torch" and args.devices else args.torch_devices
        kinds.append(("torch", torch_devs.split(",")))
    default = TimingConfig()
    for label, devices in kinds:
        print(f"{label}: devices {','.join(devices)}" + (f", mode {args.mode}" if label == "openvino" else "")
              + f", timing: {default.warmup} warm-up + {default.repeats}x{default.block} runs, 1 thread "
              f"per device; race margin {default.race_margin:.0%}, cache {default.stage_cache} stages"
              + (f" / {default.stage_cache_mb:g} MB" if label == "openvino" else ""))
    mw = max(11, max(len(m) for m in args.models.split(",")) + 1)
    tag = args.backend != "openvino"  # a backend column when it is not the only one of old
    print((f"{'backend':<10}" if tag else "")
          + f"{'model':<{mw}}{'stream':<12}{'setting':<12}{'placements/s':>13}{'speed-up':>10}{'stopped':>9}"
          f"{'failed':>8}{'best ms':>9}{'re-measured ms':>16}{'95% +/-':>10}")
    for model_name, (label, devices) in ((m, k) for m in args.models.split(",") for k in kinds):
        if label == "torch":
            graph, make_backend = torch_backends(model_name, args.coarsen, devices)
        else:
            graph, make_backend = openvino_backends(model_name, args.coarsen, devices, args.mode)
        n = graph.num_nodes
        col = f"{label:<10}" if tag else ""
        streams = {"cold": cold_stream, "converging": converging_stream}
        for stream_name in args.streams.split(","):
            make = streams[stream_name]
            backends = {k: make_backend(TimingConfig(**kw)) for k, kw in SETTINGS.items()}
            stream = make(n, args.placements, args.seed)
            res = run_stream(backends, graph, stream, devices)
            base = len(stream) / res["spent"]["old"]
            for k, backend in backends.items():
                rate = len(stream) / res["spent"][k]
                best = res["best"].get(k)
                if best is None:
                    print(f"{col}{model_name:<{mw}}{stream_name:<12}{k:<12}{rate:>13.2f}   (no placement ran)")
                    continue
                med, half = remeasure(backend, graph, best[1], devices, args.rounds)
                print(f"{col}{model_name:<{mw}}{stream_name:<12}{k:<12}{rate:>13.2f}{rate / base:>9.2f}x"
                      f"{res['stopped'][k]:>9}{res['failed'][k]:>8}{best[0] * 1e3:>9.2f}{med * 1e3:>16.2f}"
                      f"{half:>10.1%}")
            if args.overlap and label == "openvino" and "+settle" in res["best"]:
                alone, busy = overlap(backends["+settle"], graph, res["best"]["+settle"][1], devices,
                                      args.rounds)
                print(f"{col}{model_name:<{mw}}{stream_name:<12}overlap: best alone {alone * 1e3:.2f} ms, while "
                      f"another thread compiles {busy * 1e3:.2f} ms ({busy / alone - 1:+.1%})")
            del backends


if __name__ == "__main__":
    main()
