"""Racing: time a placement only as long as it takes to know whether it can beat the best.

A learner needs the latency of a clearly slow placement only roughly, and the
latency of a placement close to the best precisely. While timing a placement
block by block (:func:`envs.openvino.runners.time_runs`) against the best
latency measured so far, :func:`race_step` decides after each block:

* ``stop``: after at least ``TimingConfig.race_min_blocks`` blocks, even the
  fastest block so far, and the last warm-up run, are more than
  ``race_margin`` slower than the best. The fastest of a few blocks is a low
  estimate of a placement's latency (timing noise only adds time), so a
  placement that really is as fast as the best stops here only if every one
  of its blocks and its last warm-up run came out ``race_margin`` slow (with
  the default of one block: four runs in a row). A placement stopped early
  can never become the best: its reported median is at least its fastest
  block.
* ``settled``: after ``race_settle`` blocks even the fastest block is slower
  than the best (by less than the margin): the placement cannot claim the
  best, and the median of these blocks is its latency. Precision is spent
  where a placement may become the best, not on a close second.
* ``more``: the planned ``repeats`` blocks are done, and the interval of the
  median (:mod:`envs.intervals`) is wider than ``TimingConfig.precision``
  (half-width over the median) while the 95% interval still overlaps the best:
  time another block. The width is judged on the :data:`STOP_LEVEL` (98%)
  interval, so the 95% interval reported when it stops is narrower still and
  keeps its coverage although the stop depends on its width. A placement whose interval lies wholly above the best is
  ``settled`` there: it is clearly worse at the precision reached and needs no
  tighter interval. So one rule decides both how precise a timing is and when
  racing ends it: precision is spent on the close calls, up to
  ``precision_cap_s`` seconds of blocks (``capped``). Unraced timings
  (baselines, ``measure``, ``apply``, re-measurements) follow the same rule
  with no best to compare with: blocks until the precision or the cap. With
  ``precision`` 0, the planned blocks are timed, and a median that claims a new
  best by less than ``race_margin`` is timed up to ``race_extra`` times the
  planned blocks again.
* ``go`` / ``done``: keep timing / finished (the precision reached).

Before the blocks, :func:`far_slower` looks at the last warm-up run: a
placement whose warm-up run took more than ``race_far`` (2) times the best is
stopped there, with no timed block. Most placements an untrained policy
proposes are several times slower than the best (on ResNet-50 with CPU +
CPU_F32 a random split runs 3-6x the bf16 CPU's time), and timing
``race_min_blocks`` blocks of them was most of a cold stream's time. A
warm-up run is a high estimate (a first run allocates), but not by a factor
of two once the first run is past: with two warm-up runs the second is
judged.

What these decisions cost is measured by replaying them on recorded runs
(``bench/bench_racing.py``): on ResNet-50 with CPU + CPU_F32, a converging
stream's runs per placement went from 12.2-13.9 (two blocks before a stop, every
planned block for a close second) to 7.9-9.1 with one block and settling, quiet or
busy; one settled placement of 60 was faster in its full timing than the best of
the moment, and the stream's fastest was the chosen best in every setting.

Racing only applies to the method's own placements; baselines and the final
re-measurement are always timed in full (the backend is asked to race only by
:meth:`envs.placement_env.PlacementEnv.measure_array`).
"""
from __future__ import annotations

from typing import Literal, Optional, Sequence

import numpy as np

from envs.base import TimingConfig
from envs.intervals import half_width, median_interval

__all__ = ["race_step", "far_slower", "STOP_LEVEL"]

#: the level of the interval whose width the precision rule judges (the reported one is 95%)
STOP_LEVEL = 0.98

Decision = Literal["go", "stop", "settled", "more", "done", "capped"]


def race_step(samples: Sequence[float], best: Optional[float], timing: TimingConfig,
              warm: Optional[float] = None, elapsed_s: float = 0.0) -> Decision:
    """What to do after the block samples ``samples`` (block means, seconds) against ``best``.

    ``warm`` is the last warm-up run (seconds), if there was one: a stop needs
    it to be slow too; ``elapsed_s`` the seconds the blocks took so far. With
    ``best`` None (nothing measured yet, or racing off) no racing rule applies:
    at least ``timing.repeats`` blocks, then more until the precision is reached
    (``done``) or ``timing.precision_cap_s`` is spent (``capped``); with
    ``timing.precision`` 0, exactly ``repeats`` blocks.
    """
    n = len(samples)
    planned = timing.repeats
    racing = best is not None and timing.race
    if racing and n:
        fastest = min(samples)
        evidence = fastest if warm is None else min(fastest, warm)
        if n < planned and n >= max(1, timing.race_min_blocks) \
                and evidence > best * (1.0 + timing.race_margin):
            return "stop"
        if timing.race_settle and n >= timing.race_settle and fastest > best \
                and (n < planned or timing.precision > 0):
            return "settled"
    if n < planned:
        return "go"
    if timing.precision <= 0:
        if racing and n < planned * (1 + max(0, timing.race_extra)):
            median = float(np.median(samples))
            if best * (1.0 - timing.race_margin) <= median < best:
                return "more"
        return "done"
    low, high, _ = median_interval(samples)
    if racing and low > best:
        return "settled"  # clearly slower at the precision reached: no tighter interval needed
    # the width is judged on the wider STOP_LEVEL interval: stopping on a narrow 95%
    # interval would favour the draws whose interval misses the median (docs/methods.md)
    wide = median_interval(samples, STOP_LEVEL)
    if half_width(float(np.median(samples)), wide[:2]) <= timing.precision:
        return "done"
    if elapsed_s >= timing.precision_cap_s:
        return "capped"
    return "more"


def far_slower(run_s: float, best: Optional[float], timing: TimingConfig) -> bool:
    """Whether a warm-up run of ``run_s`` seconds says the placement is far slower
    than ``best`` (more than ``race_far`` times it), so it needs no timed block."""
    return (best is not None and timing.race and timing.race_far > 0
            and run_s > best * timing.race_far)
