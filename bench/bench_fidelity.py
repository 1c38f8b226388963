"""How well the simulator ranks real placements, and how fast real measurement is.

    python bench/bench_fidelity.py                       # resnet50 on CPU + CPU_F32
    python bench/bench_fidelity.py --model tiny_cnn --placements 30

1. Profiles the model on both devices with OpenVINO (per-op times).
2. Measures the model on each device alone and scales that device's op times to it
   (:func:`envs.profiling.calibrate_compute`), then measures ``--fit`` placements for
   real (splits, blocks and random ones, crossing the link from once to many times) and
   fits a cost per crossing and per tensor moved to them
   (:func:`envs.profiling.fit_link_costs`).
3. Measures ``--placements`` other placements of several kinds (contiguous splits,
   blocks, random per node) in two interleaved rounds, and reports the mean absolute
   relative error and the Spearman rank correlation of simulated vs measured latency
   (first round), per kind and overall, before the fit (the op times as recorded, compute
   only), with the link fit alone, and after the calibration and the fit, each beside the
   same figure between the two real rounds: the ceiling any model reaches on this
   machine. ``--json`` also writes every latency.
4. Reports placements measured per second (compile + timing), the timing
   repeats used and the relative spread of the measurements.

``--backend torch`` does the same for a torch profile: the model exported with
``torch.export``, per-node times of its ATen graph on each torch device
(:mod:`envs.pytorch.profile_ops`, as ``python -m hsdag_ray.profile --backend torch``
records them), placements measured by the torch backend on ``--devices`` (default
``cpu,cpu:bf16``); neither OpenVINO nor Ray is imported::

    python bench/bench_fidelity.py --backend torch --model tiny_cnn --devices cpu,cpu:bf16
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from envs.base import TimingConfig
from envs.openvino.node_backend import OpenVINOGraphBackend
from envs.simulator import Simulator
from envs.backends import build_graph
from envs.profiling import calibrate_compute, fit_link_costs, uncalibrated
from hsdag_core.device_profile import Profile, cost_graph, split_placements


def kinds(n: int, count: int, seed: int) -> list[tuple[str, np.ndarray]]:
    """``count`` placements: a third contiguous splits, a third blocks, a third random."""
    rng = np.random.default_rng(seed)
    k = count // 3
    out = []
    for c in rng.integers(1, n, size=k):
        p = (np.arange(n) >= c).astype(np.int64)
        out.append(("contiguous", p if rng.random() < 0.5 else 1 - p))
    for b in rng.integers(2, max(3, n // 3), size=k):
        out.append(("blocks", ((np.arange(n) // b + rng.integers(0, 2)) % 2).astype(np.int64)))
    while len(out) < count:
        out.append(("random", rng.integers(0, 2, n)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--backend", choices=("openvino", "torch"), default="openvino",
                    help="openvino (default) or torch (PyTorch devices and a torch profile)")
    ap.add_argument("--devices", default=None,
                    help="devices (default CPU,CPU_F32; with --backend torch cpu,cpu:bf16)")
    ap.add_argument("--fit", type=int, default=12, help="placements used to fit the costs")
    ap.add_argument("--placements", type=int, default=36, help="held-out placements compared")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--mode", default="pipeline", help="OpenVINO backend mode (pipeline, auto, hetero)")
    ap.add_argument("--json", default=None, help="also write the figures and every latency to this file")
    args = ap.parse_args()
    on_torch = args.backend == "torch"
    args.devices = args.devices or ("cpu,cpu:bf16" if on_torch else "CPU,CPU_F32")
    devices = args.devices.split(",")
    model, fine, _, _ = build_graph(args.model, "none", None, "torch" if on_torch else "auto")
    timing = TimingConfig(repeats=args.repeats, threads=1)
    profile = Profile(model=fine.name, devices={}, op_time_s={}, source="torch" if on_torch else "openvino")
    if on_torch:
        from envs.pytorch.backend import TorchBackend
        from envs.pytorch.profile_ops import profile_ops

        backend = TorchBackend(fine, model, devices, timing)
        for d in backend.torch_devices:
            profile.devices[d.name] = {"kind": "measured"}
            profile.op_time_s[d.name] = profile_ops(model, d, runs=max(3, timing.repeats),
                                                    warmup=max(1, timing.warmup), cache=backend.cache)
        devices = backend.devices  # names, without a memory cap
    else:
        backend = OpenVINOGraphBackend(fine, model, devices, args.mode, timing)
        for d in backend.devices:
            profile.devices[d] = {"kind": "measured"}
            profile.op_time_s[d] = backend.ov.profile_ops(d)

    def measure(p: np.ndarray):
        return backend.measure({nm: devices[int(d)] for nm, d in zip(fine.names, p)})

    whole = {d: measure(np.full(fine.num_nodes, i)) for i, d in enumerate(devices[:2])}
    fit_ps = split_placements(fine.num_nodes, 2, args.fit, seed=1)
    fit_y = [measure(p).latency_s for p in fit_ps]
    link_only = uncalibrated(profile)  # the link fit on the op times as recorded
    fit_link_costs(fine, link_only, fit_ps, fit_y)
    calibrate_compute(fine, profile, {d: m.latency_s for d, m in whole.items() if m.ok})
    fit = fit_link_costs(fine, profile, fit_ps, fit_y)
    held = kinds(fine.num_nodes, args.placements, seed=2)
    t0 = time.perf_counter()
    passes = []
    spreads = []
    for _ in range(2):  # interleaved: every placement once per round
        ys = []
        for _, p in held:
            m = measure(p)
            ys.append(m.latency_s if m.ok else np.nan)
            spreads.append(m.spread)
        passes.append(np.array(ys))
    rate = 2 * len(held) / (time.perf_counter() - t0)
    first, second = passes
    sim_fit = Simulator(cost_graph(fine, profile))
    plain = uncalibrated(profile)
    sim_plain = Simulator(cost_graph(fine, plain))
    pred_fit = np.array([sim_fit.sequential(p).value for _, p in held])
    pred_plain = np.array([sim_plain.sequential(p).value for _, p in held])
    sim_link = Simulator(cost_graph(fine, link_only))
    pred_link = np.array([sim_link.sequential(p).value for _, p in held])
    crossings = np.array([int((p[1:] != p[:-1]).sum()) for _, p in held])
    ok = np.isfinite(first) & np.isfinite(second)
    print(f"model {args.model}, devices {args.devices}, "
          + ("backend torch (torch profile), " if on_torch else f"backend mode {args.mode}, ")
          + f"{fine.num_nodes} nodes, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"fitted on {args.fit} placements: per crossing {fit['boundary_s'] * 1e3:.3f} ms, per tensor "
          f"moved {fit['link_latency_s'] * 1e6:.1f} us, bandwidth "
          f"{(fit['link_bandwidth_Bps'] or float('inf')) / 1e9:.2f} GB/s; op times scaled by "
          + ", ".join(f"{s:.2f} ({d})" for d, s in fit.get("compute_scale", {}).items()))
    print("mean |error| and Spearman against the first round; the ceiling is the second round's")
    print("before: op times as recorded; link: the link fit alone; after: calibrated to each "
          "device's whole-model latency, then the link fit")
    print(f"{'placements':<12}{'n':>4}{'crossings':>11}{'MAE before':>12}{'link':>7}{'after':>8}"
          f"{'ceiling':>9}{'Spearman before':>17}{'link':>7}{'after':>8}{'ceiling':>9}")
    labels = np.array([k for k, _ in held])
    figures = {}
    for kind in ("contiguous", "blocks", "random", "all"):
        sel = ok & ((labels == kind) if kind != "all" else True)
        if sel.sum() < 3:
            continue
        y = first[sel]
        row = {"n": int(sel.sum()), "crossings_median": float(np.median(crossings[sel])),
               "mae_before": float(np.mean(np.abs(pred_plain[sel] - y) / y)),
               "mae_link_only": float(np.mean(np.abs(pred_link[sel] - y) / y)),
               "mae_after": float(np.mean(np.abs(pred_fit[sel] - y) / y)),
               "mae_ceiling": float(np.mean(np.abs(second[sel] - y) / y)),
               "spearman_before": float(spearmanr(pred_plain[sel], y).statistic),
               "spearman_link_only": float(spearmanr(pred_link[sel], y).statistic),
               "spearman_after": float(spearmanr(pred_fit[sel], y).statistic),
               "spearman_ceiling": float(spearmanr(second[sel], y).statistic)}
        figures[kind] = row
        print(f"{kind:<12}{row['n']:>4}{row['crossings_median']:>11.0f}{row['mae_before']:>12.1%}"
              f"{row['mae_link_only']:>7.1%}{row['mae_after']:>8.1%}{row['mae_ceiling']:>9.1%}"
              f"{row['spearman_before']:>17.3f}{row['spearman_link_only']:>7.3f}"
              f"{row['spearman_after']:>8.3f}{row['spearman_ceiling']:>9.3f}")
    print(f"measurement: {rate:.2f} placements/s (compile + {timing.warmup} warm-up + "
          f"{timing.repeats}x{timing.block} timed runs), median relative spread "
          f"{np.nanmedian(spreads):.1%}, latency {np.nanmin(first) * 1e3:.2f}-{np.nanmax(first) * 1e3:.2f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "model": args.model, "devices": devices, "nodes": fine.num_nodes, "fit": fit,
            "figures": figures, "placements_per_s": rate, "kinds": labels.tolist(),
            "crossings": crossings.tolist(), "first_s": first.tolist(), "second_s": second.tolist(),
            "predicted_before_s": pred_plain.tolist(), "predicted_link_only_s": pred_link.tolist(),
            "predicted_after_s": pred_fit.tolist()},
            indent=1))


if __name__ == "__main__":
    main()
