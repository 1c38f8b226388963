"""The racing replay of bench/bench_racing.py: the project's decisions, charged and judged."""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path


from bench.bench_racing import replay  # noqa: E402
from envs.base import TimingConfig  # noqa: E402

T = TimingConfig()  # 2 warm-up + 7 blocks of 3


def trace(warm: float, *blocks: float) -> list[float]:
    """Two warm-up runs (the last ``warm``) and blocks of three equal runs."""
    return [warm, warm] + [b for b in blocks for _ in range(T.block)]


def test_without_racing_every_placement_costs_its_planned_runs() -> None:
    traces = [trace(1.0, *[1.0] * 8), trace(1.5, *[1.5] * 8)]
    r = replay(traces, replace(T, race=False))
    assert r["runs"] == T.warmup + T.repeats * T.block and r["cut"] == 0 and r["chosen"] == 1.0


def test_a_clearly_slower_placement_stops_after_one_block_and_a_close_second_settles() -> None:
    best, slow, close = trace(1.0, *[1.0] * 8), trace(1.5, *[1.5] * 8), trace(1.03, *[1.03] * 8)
    r = replay([best, slow, close], T)
    planned = T.warmup + T.repeats * T.block
    assert r["runs"] == (planned + (T.warmup + T.block) + (T.warmup + T.race_settle * T.block)) / 3
    assert r["cut"] == 2 and r["lost"] == 0 and r["near"] == 0 and r["chosen"] == 1.0
    # the earlier default: two blocks before a stop, every planned block for the close second
    old = replay([best, slow, close], replace(T, race_min_blocks=2, race_settle=0, precision=0))
    assert old["runs"] == (planned + (T.warmup + 2 * T.block) + planned) / 3 and old["cut"] == 1


def test_a_new_best_cut_short_by_slow_first_runs_is_counted_lost() -> None:
    # slow warm-up and first block (a busy moment), then faster than the best in every later block
    unlucky = trace(1.2, 1.2, *[0.9] * 7)
    r = replay([trace(1.0, *[1.0] * 8), unlucky], T)
    assert r["cut"] == 1 and r["lost"] == 1 and r["chosen"] > 1.0
    # a warm-up run near the best keeps it timed: found
    lucky = replay([trace(1.0, *[1.0] * 8), trace(1.0, 1.2, *[0.9] * 7)], T)
    assert lucky["lost"] == 0 and lucky["chosen"] == 1.0
