"""Timing a runnable placement, whatever runs it: warm-up, timed blocks, racing, time limits.

:func:`time_runs` times anything with an ``infer()`` method (an OpenVINO infer request or
stage pipeline, a PyTorch placed program) the same way, so every real backend's figures
mean the same; a step that fails raises :class:`StageFailure`, which a backend turns into
a failed :class:`~envs.base.Measurement`.
"""
from __future__ import annotations

import time
from typing import Mapping, Optional

from envs.base import TimingConfig
from envs.intervals import LEVEL, WITHIN_NOISE, compare, half_width, interval_fields, median_interval
from envs.racing import far_slower, race_step

__all__ = ["OVERSUBSCRIPTION", "StageFailure", "time_runs", "timeout_text", "busy_threads", "cpu_per_wall",
           "median_interval", "interval_fields", "half_width", "compare", "LEVEL", "WITHIN_NOISE"]

# Busy threads (CPU time / wall time) above limit * this mean a thread limit was ignored.
OVERSUBSCRIPTION = 1.15


class StageFailure(Exception):
    """A measurement step failed; carries the Measurement stage and sentence."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage
        self.message = message


def time_runs(runner, timing: TimingConfig, limit: int, deadline: float,
               info: dict[str, object], best: Optional[float] = None) -> list[float]:
    """Warm-up runs, then ``timing.repeats`` blocks of ``timing.block`` runs; returns block means.

    Unraced (``best`` None: baselines, re-measurements, ``measure``, ``apply``) the warm-up
    goes on past ``timing.warmup`` runs until two consecutive runs agree within
    ``timing.warmup_agree`` (at most ``timing.warmup_max`` runs; ``info['warmup_runs']``).
    ``info['warmup_s']`` and ``info['timed_s']`` say where the time went.

    With ``best`` (the best latency so far, seconds) the blocks are raced
    against it (:func:`envs.racing.race_step`): fewer blocks for a
    clearly slower placement (``info['raced'] = 'stopped'``) or one that
    cannot claim the best (``'settled'``), none when the
    last warm-up run was already far slower (:func:`envs.racing.far_slower`;
    that run is returned as the one sample), more for a close new best
    (``'extended'``). Sets ``info['cpu_per_wall']``, and
    ``info['warning']`` when more than ``limit`` threads (0 = no limit) were
    busy; raises ``StageFailure('timeout')`` past ``deadline``.
    """
    runs, warm_s, last = 0, 0.0, None
    warm_start = time.perf_counter()
    # untimed runs: ``warmup`` of them; unraced, more until two in a row agree (TimingConfig)
    settle = timing.warmup_agree > 0 and best is None and timing.warmup > 0
    while runs < timing.warmup or (settle and runs < max(timing.warmup, timing.warmup_max)
                                   and abs(warm_s - last) > timing.warmup_agree * min(warm_s, last)):
        start = time.perf_counter()
        runner.infer()
        last, warm_s = warm_s if runs else None, time.perf_counter() - start
        runs += 1
        if last is None:
            last = 0.0  # a single run agrees with nothing
        if time.perf_counter() > deadline:
            raise StageFailure("timeout", timeout_text(timing, info, runs))
    info["warmup_runs"] = runs
    info["warmup_s"] = time.perf_counter() - warm_start
    if timing.warmup and far_slower(warm_s, best, timing):
        info.update(raced="stopped", race_best_s=best)
        return [warm_s]
    samples = []
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    warm = warm_s if timing.warmup else None
    decision = race_step(samples, best, timing, warm)
    while decision in ("go", "more"):
        start = time.perf_counter()
        for _ in range(timing.block):
            runner.infer()
            runs += 1
            if time.perf_counter() > deadline:
                raise StageFailure("timeout", timeout_text(timing, info, runs))
        samples.append((time.perf_counter() - start) / timing.block)
        if decision == "more":
            info["raced"] = "extended"
        decision = race_step(samples, best, timing, warm)
    if decision in ("stop", "settled"):
        info["raced"] = "stopped" if decision == "stop" else "settled"
    if best is not None and timing.race:
        info["race_best_s"] = best
    busy = cpu_per_wall(cpu_start, wall_start)
    info["cpu_per_wall"] = busy
    info["timed_s"] = time.perf_counter() - wall_start
    if limit and busy > limit * OVERSUBSCRIPTION:
        info["warning"] = (f"{busy:.1f} threads were busy where each device may use {limit}; "
                           "this timing is not comparable with runs that kept the limit")
    return samples


def timeout_text(timing: TimingConfig, info: Mapping[str, object], runs: int) -> str:
    return (f"measurement exceeded its time budget of {timing.timeout_s:g} s after "
            f"{runs} runs (compile took {float(info.get('compile_s', 0.0)):.2f} s); "
            "raise TimingConfig.timeout_s or lower warmup/repeats/block")


def busy_threads(runner, runs: int) -> float:
    """Process CPU time over wall time during ``runs`` inferences (about the busy threads)."""
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    for _ in range(runs):
        runner.infer()
    return cpu_per_wall(cpu_start, wall_start)


def cpu_per_wall(cpu_start: float, wall_start: float) -> float:
    """Process CPU seconds per wall second since the given ``process_time`` / ``perf_counter``."""
    return (time.process_time() - cpu_start) / max(time.perf_counter() - wall_start, 1e-9)
