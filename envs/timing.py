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

__all__ = ["OVERSUBSCRIPTION", "StageFailure", "time_runs", "timeout_text", "precision_info",
           "precision_words", "busy_threads", "cpu_per_wall",
           "median_interval", "interval_fields", "half_width", "compare", "LEVEL", "WITHIN_NOISE"]

# Busy threads (CPU time / wall time) above limit * this mean a thread limit was ignored.
OVERSUBSCRIPTION = 1.15


class StageFailure(Exception):
    """A measurement step failed; carries the Measurement stage and sentence."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage
        self.message = message


def block_runs(timing: TimingConfig, run_s: Optional[float]) -> int:
    """Runs per timed block: ``timing.block``, fewer where a run of ``run_s`` seconds (the
    last warm-up run; None: unknown) makes a block longer than ``timing.block_s``."""
    if not timing.block_s or run_s is None or run_s <= 0:
        return timing.block
    return max(1, min(timing.block, round(timing.block_s / run_s)))


def time_runs(runner, timing: TimingConfig, limit: int, deadline: float,
               info: dict[str, object], best: Optional[float] = None) -> list[float]:
    """Warm-up runs, then blocks of ``timing.block`` runs (fewer for long runs,
    :func:`block_runs`; ``info['block_runs']``); returns block means.

    At least ``timing.repeats`` blocks, then more until the 95% interval of their
    median is within ``timing.precision`` of it, or ``timing.precision_cap_s``
    seconds of blocks (or the time limit ``deadline``) stop them
    (:func:`envs.racing.race_step`); ``info['precision']`` says which
    (:func:`precision_info`). ``timing.precision`` 0: exactly ``repeats`` blocks.

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
    (``'extended'``: timed past ``repeats`` toward the precision). Sets ``info['cpu_per_wall']``, and
    ``info['warning']`` when more than ``limit`` threads (0 = no limit) were
    busy; raises ``StageFailure('timeout')`` past ``deadline``. A runner with a ``clock``
    (seconds, like :func:`time.perf_counter`) is timed by it: a simulated runner's time.
    """
    clock = getattr(runner, "clock", time.perf_counter)  # a simulated runner keeps its own time
    runs, warm_s, last = 0, 0.0, None
    warm_start = clock()
    # untimed runs: ``warmup`` of them; unraced, more until two in a row agree (TimingConfig)
    settle = timing.warmup_agree > 0 and best is None and timing.warmup > 0
    while runs < timing.warmup or (settle and runs < max(timing.warmup, timing.warmup_max)
                                   and abs(warm_s - last) > timing.warmup_agree * min(warm_s, last)):
        start = clock()
        runner.infer()
        last, warm_s = warm_s if runs else None, clock() - start
        runs += 1
        if last is None:
            last = 0.0  # a single run agrees with nothing
        if clock() > deadline:
            raise StageFailure("timeout", timeout_text(timing, info, runs))
    info["warmup_runs"] = runs
    info["warmup_s"] = clock() - warm_start
    if timing.warmup and far_slower(warm_s, best, timing):
        info.update(raced="stopped", race_best_s=best)
        return [warm_s]
    warm = warm_s if timing.warmup else None
    per_block = info["block_runs"] = block_runs(timing, warm)
    samples = []
    cpu_start, wall_start = time.process_time(), clock()
    decision = race_step(samples, best, timing, warm)
    while decision in ("go", "more"):
        start = clock()
        if decision == "more" and start + (start - wall_start) / len(samples) > deadline:
            decision = "capped"  # the next block would pass the time limit: stop short of it
            break
        for _ in range(per_block):
            runner.infer()
            runs += 1
            if clock() > deadline:
                raise StageFailure("timeout", timeout_text(timing, info, runs))
        samples.append((clock() - start) / per_block)
        if decision == "more" and best is not None and timing.race:
            info["raced"] = "extended"
        decision = race_step(samples, best, timing, warm, clock() - wall_start)
    if decision in ("stop", "settled"):
        info["raced"] = "stopped" if decision == "stop" else "settled"
    if timing.precision > 0 and decision in ("done", "capped"):
        info["precision"] = precision_info(samples, timing, decision == "capped")
    if best is not None and timing.race:
        info["race_best_s"] = best
    info["timed_s"] = clock() - wall_start
    if clock is not time.perf_counter:
        return samples  # simulated time: no threads were busy
    busy = cpu_per_wall(cpu_start, wall_start)
    info["cpu_per_wall"] = busy
    if limit and busy > limit * OVERSUBSCRIPTION:
        info["warning"] = (f"{busy:.1f} threads were busy where each device may use {limit}; "
                           "this timing is not comparable with runs that kept the limit")
    return samples


def precision_info(samples, timing: TimingConfig, capped: bool) -> dict[str, object]:
    """What a timing's precision rule did: the ``target`` half-width, the one
    ``reached`` (half the 95% interval over the median), the ``blocks`` timed, and
    whether the time cap (``capped``, ``cap_s``) stopped it before the target."""
    import numpy as np

    low, high, _ = median_interval(samples)
    return {"target": timing.precision, "reached": half_width(float(np.median(samples)), (low, high)),
            "blocks": len(samples), "capped": capped, "cap_s": timing.precision_cap_s}


def precision_words(info: Mapping[str, object]) -> str:
    """A timing's precision in words (empty without a precision rule), e.g. ``+/-1.6%
    in 12 blocks (target +/-2%)`` or, when the cap stopped it, ``+/-3.4% (target +/-2%):
    the 15 s time cap stopped it``."""
    p = info.get("precision")
    if not isinstance(p, Mapping) or p.get("reached") is None:
        return ""
    target = f"target +/-{float(p['target']) * 100:g}%"
    if p.get("capped"):
        return f"+/-{float(p['reached']):.1%} ({target}): the {float(p['cap_s']):g} s time cap stopped it"
    return f"+/-{float(p['reached']):.1%} in {p['blocks']} blocks ({target})"


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
