"""Fidelity of the simulator on the real pair: a torch profile of ``cpu`` + the GPU
(per-node times, link costs fitted to a few real splits), then placements of several kinds
(both devices alone, contiguous splits, blocks, random) measured in two interleaved rounds.
The simulator's mean absolute error and Spearman rank correlation against the first round,
beside the ceiling any model reaches on this machine: the second round against the first;
"before" is the profile as recorded, op by op (compute only), so the gain of the fit
(:func:`envs.profiling.calibrate_compute`: each device's op times scaled to the whole model
run on it; :func:`envs.profiling.fit_link_costs`: a cost per crossing and per tensor
moved) shows.
Aim: a mean error of at most 10% and a Spearman within 0.05 of the ceiling."""
from __future__ import annotations

import time
from typing import Any, Optional

import numpy as np

from bench.gpu_check.common import graphs, ms, profile, say, timing, verdict

__all__ = ["fidelity", "lines", "judge", "AIM_ERROR", "AIM_GAP"]

AIM_ERROR = 0.10
AIM_GAP = 0.05


def fidelity(spec: str, gpu: str, count: int, fit: int, precision: Optional[float] = None) -> dict[str, Any]:
    from scipy.stats import spearmanr

    from envs.pytorch.backend import TorchBackend
    from envs.simulator import Simulator
    from envs.profiling import uncalibrated
    from hsdag_core.device_profile import cost_graph, split_placements

    t0 = time.perf_counter()
    tm = timing(repeats=3, precision=precision)
    devices = ["cpu", gpu]
    prof = profile(spec, devices, fit, tm)
    program, _, coarse = graphs(spec)
    sim = Simulator(cost_graph(coarse, prof, devices))
    before = Simulator(cost_graph(coarse, uncalibrated(prof), devices))
    backend = TorchBackend(coarse, program, devices, tm)
    placements = [np.zeros(coarse.num_nodes, np.int64), np.ones(coarse.num_nodes, np.int64)]
    placements += split_placements(coarse.num_nodes, 2, count - 2, seed=1)
    rounds: list[list] = [[], []]
    for r in range(2):  # interleaved: every placement once per round
        for p in placements:
            rounds[r].append(backend.measure_array(p))
    keep = [i for i in range(len(placements)) if rounds[0][i].ok and rounds[1][i].ok]
    first = np.array([rounds[0][i].latency_s for i in keep])
    second = np.array([rounds[1][i].latency_s for i in keep])
    predicted = np.array([sim.sequential(placements[i]).value for i in keep])
    unfitted = np.array([before.sequential(placements[i]).value for i in keep])
    out = {"model": spec, "devices": devices, "nodes": coarse.num_nodes, "placements": len(keep),
           "spearman_simulator": float(spearmanr(predicted, first).statistic),
           "spearman_ceiling": float(spearmanr(second, first).statistic),
           "spearman_before_fit": float(spearmanr(unfitted, first).statistic),
           "mean_abs_error": float(np.mean(np.abs(predicted - first) / first)),
           "mean_abs_error_before_fit": float(np.mean(np.abs(unfitted - first) / first)),
           "crossings_max": int(max((placements[i][1:] != placements[i][:-1]).sum() for i in keep)),
           "mean_abs_error_ceiling": float(np.mean(np.abs(second - first) / first)),
           "median_half_width": float(np.median([rounds[0][i].half_width for i in keep])),
           "cpu_only_s": float(first[0]), "gpu_only_s": float(first[1]),
           "link_fit": prof.fit, "seconds": time.perf_counter() - t0}
    say(f"fidelity {spec}: error {out['mean_abs_error']:.0%} (ceiling {out['mean_abs_error_ceiling']:.0%}), "
        f"Spearman {out['spearman_simulator']:.2f} (ceiling {out['spearman_ceiling']:.2f}), "
        f"{len(keep)} placements, {out['seconds']:.0f} s")
    return out


def lines(figs: list[dict[str, Any]], gpu: str) -> list[str]:
    out = [f"## Simulator fidelity on cpu + {gpu}", "",
           "Each placement measured in two interleaved rounds; the ceiling is the second round "
           "against the first.", "",
           "| model | nodes | placements | most crossings | mean error before fit | after | ceiling "
           "| Spearman before fit | after | ceiling | median half-width | cpu only (ms) | device only (ms) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for f in figs:
        out.append(f"| {f['model']} | {f['nodes']} | {f['placements']} | {f['crossings_max']} | "
                   f"{f['mean_abs_error_before_fit']:.0%} | {f['mean_abs_error']:.0%} | "
                   f"{f['mean_abs_error_ceiling']:.0%} | {f['spearman_before_fit']:.2f} | "
                   f"{f['spearman_simulator']:.2f} | "
                   f"{f['spearman_ceiling']:.2f} | {f['median_half_width']:.1%} | {ms(f['cpu_only_s'])} | "
                   f"{ms(f['gpu_only_s'])} |")
    return out


def judge(figs: list[dict[str, Any]]) -> str:
    err = max(f["mean_abs_error"] for f in figs)
    gap = max(f["spearman_ceiling"] - f["spearman_simulator"] for f in figs)
    return verdict(err <= AIM_ERROR and gap <= AIM_GAP,
                   f"mean error at most {AIM_ERROR:.0%} and Spearman within {AIM_GAP} of the ceiling",
                   f"worst mean error {err:.0%}, worst Spearman gap {gap:.2f}")
