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
* ``more``: the planned blocks are done and the median claims a new best by
  less than ``race_margin``: time up to ``race_extra`` times the planned
  blocks again before believing it (a lucky block is not a new best).
* ``go`` / ``done``: keep timing / finished.

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

__all__ = ["race_step", "far_slower"]

Decision = Literal["go", "stop", "settled", "more", "done"]


def race_step(samples: Sequence[float], best: Optional[float], timing: TimingConfig,
              warm: Optional[float] = None) -> Decision:
    """What to do after the block samples ``samples`` (block means, seconds) against ``best``.

    ``warm`` is the last warm-up run (seconds), if there was one: a stop needs
    it to be slow too. ``best`` None (nothing measured yet, or racing off)
    times the planned ``timing.repeats`` blocks exactly, as without racing.
    """
    n = len(samples)
    planned = timing.repeats
    if best is None or not timing.race:
        return "go" if n < planned else "done"
    if n < planned:
        fastest = min(samples) if samples else float("inf")
        evidence = fastest if warm is None else min(fastest, warm)
        if n >= max(1, timing.race_min_blocks) and evidence > best * (1.0 + timing.race_margin):
            return "stop"
        if timing.race_settle and n >= timing.race_settle and fastest > best:
            return "settled"
        return "go"
    limit = planned * (1 + max(0, timing.race_extra))
    if n < limit:
        median = float(np.median(samples))
        if best * (1.0 - timing.race_margin) <= median < best:
            return "more"
    return "done"


def far_slower(run_s: float, best: Optional[float], timing: TimingConfig) -> bool:
    """Whether a warm-up run of ``run_s`` seconds says the placement is far slower
    than ``best`` (more than ``race_far`` times it), so it needs no timed block."""
    return (best is not None and timing.race and timing.race_far > 0
            and run_s > best * timing.race_far)
