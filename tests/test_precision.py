"""Timings repeated until their interval is tight (TimingConfig.precision): the rule, its
cap, its coverage on seeded draws, racing and precision as one rule, and the setting on
every command line and in YAML."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from envs.base import TimingConfig
from envs.intervals import median_interval
from envs.noisy import NoisySimulatorBackend
from envs.racing import race_step
from envs.timing import precision_words
from hsdag_core.costgraph import CostGraph

#: one run per block, seven blocks at least: the precision rule decides the rest
RULE = TimingConfig(warmup=1, warmup_agree=0.0, repeats=7, block=1, precision=0.02, precision_cap_s=10.0)


def chain() -> CostGraph:
    """Three nodes in a row on two devices; placements differ by a few percent or more."""
    comp = np.array([[1.0, 1.3], [2.0, 1.0], [1.0, 1.02]]) * 1e-3
    return CostGraph(names=["a", "b", "c"], devices=["X", "Y"], compute_s=comp, tensor_src=[0, 1],
                     tensor_bytes=np.zeros(2), edge_src=[0, 1], edge_dst=[1, 2], edge_tensor=[0, 1],
                     boundary_s=0.0, name="chain")


def test_blocks_go_on_until_the_interval_is_within_the_target():
    t = replace(RULE, race=False)
    assert race_step([1.0] * 6, None, t) == "go"  # fewer than repeats
    assert race_step([1.0] * 7, None, t) == "done"  # equal blocks: an interval of width 0
    wide = list(np.linspace(0.9, 1.1, 7))
    assert race_step(wide, None, t) == "more"  # +/-10%: time another block
    assert race_step(wide, None, t, elapsed_s=10.0) == "capped"  # ... unless the cap is spent
    assert race_step(wide, None, replace(t, precision=0)) == "done"  # 0: a fixed 7 blocks


def test_a_noisier_machine_takes_more_blocks_and_the_cap_stops_it():
    g = chain()
    placement = np.array([0, 1, 0])
    quiet = NoisySimulatorBackend(g, RULE, sigma=0.01, seed=1).measure_array(placement)
    noisy = NoisySimulatorBackend(g, RULE, sigma=0.05, seed=1).measure_array(placement)
    for m in (quiet, noisy):
        p = m.info["precision"]
        assert not p["capped"] and p["reached"] <= 0.02 and p["blocks"] == m.runs
        assert m.interval_s[0] <= m.info["exact_s"] <= m.interval_s[1]
    assert quiet.runs < noisy.runs
    # a cap of 20 ms (about 7 runs of 3 ms) stops a noisy timing short of the target, and says so
    capped = NoisySimulatorBackend(g, replace(RULE, precision_cap_s=0.02), sigma=0.2, seed=1)
    m = capped.measure_array(placement)
    p = m.info["precision"]
    assert p["capped"] and p["reached"] > 0.02 and p["reached"] == pytest.approx(m.half_width)
    words = precision_words(m.info)
    assert words.startswith(f"+/-{p['reached']:.1%} (target +/-2%)") and "0.02 s time cap stopped it" in words
    assert precision_words(quiet.info).endswith(f"in {quiet.runs} blocks (target +/-2%)")


def test_intervals_stopped_on_their_width_still_cover_the_true_median():
    # Stopping when an interval is narrow picks the draws whose interval is narrow, and
    # those miss the median more often: stopping on the 95% interval itself covers about
    # 94% here. The rule judges the width on the 98% interval (STOP_LEVEL) and reports
    # the 95% one, which keeps the reported interval's coverage at 95% or above.
    g = chain()
    placement = np.array([0, 1, 0])
    backend = NoisySimulatorBackend(g, replace(RULE, race=False, precision_cap_s=100.0), sigma=0.04, seed=0)
    hits, runs = [], []
    for _ in range(300):
        m = backend.measure_array(placement)
        assert not m.info["precision"]["capped"] and m.info["precision"]["reached"] <= 0.02
        hits.append(m.interval_s[0] <= m.info["exact_s"] <= m.interval_s[1])
        runs.append(m.runs)
    assert np.mean(hits) >= 0.93 and np.median(runs) > 7  # 300 draws: a standard error of 1.3%


def test_racing_and_precision_spend_blocks_on_the_close_calls():
    g = chain()
    t = replace(RULE, warmup=2, race_settle=3)
    backend = NoisySimulatorBackend(g, t, sigma=0.05, seed=3)
    # the best first (3.0 ms), then clearly slower ones, then a close call (0.7% slower)
    stream = {"best": [0, 1, 0], "all X": [0, 0, 0], "all Y": [1, 1, 1], "close": [0, 1, 1]}
    got = {name: backend.measure_array(np.array(p), race=True) for name, p in stream.items()}
    best = got["best"]
    assert "raced" not in best.info and best.info["precision"]["reached"] <= 0.02
    for name in ("all X", "all Y"):  # 33% and 11% slower: stopped, no 2% interval needed
        assert got[name].info["raced"] in ("stopped", "settled") and got[name].runs < best.runs
    # the close call is timed until its interval is clear of the best or within 2%
    close = got["close"]
    assert close.info.get("raced") in ("settled", "extended", None)
    if close.info.get("raced") != "settled":
        assert close.info["precision"]["reached"] <= 0.02
    # the same stream unraced: every placement timed to 2%, more runs in all
    unraced = NoisySimulatorBackend(g, t, sigma=0.05, seed=3)
    full = [unraced.measure_array(np.array(p)) for p in stream.values()]
    assert sum(m.runs for m in got.values()) < sum(m.runs for m in full)
    assert all(m.info["precision"]["reached"] <= 0.02 for m in full)


def test_a_clearly_slower_interval_settles_and_a_claim_on_the_best_goes_on():
    t = replace(RULE, race_settle=0)
    slower = [1.05, 1.06, 1.04, 1.07, 1.05, 1.06, 1.2]
    assert median_interval(slower)[0] > 1.0 and race_step(slower, 1.0, t) == "settled"
    claim = [0.97, 1.02, 0.99, 1.04, 0.96, 1.01, 0.98]  # overlaps the best, +/-3%
    assert race_step(claim, 1.0, t) == "more"


def test_precision_is_a_flag_of_every_timing_command_and_a_yaml_setting(tmp_path, capsys):
    from hsdag_ray import apply, measure, profile
    from hsdag_ray.arguments import config_from_args
    from hsdag_ray.cli import run

    for module in (measure, apply, profile):
        with pytest.raises(SystemExit):
            module.main(["--help"])
        text = capsys.readouterr().out
        assert "--precision" in text and "--precision-cap-s" in text, module.__name__
    cfg = tmp_path / "run.yaml"
    cfg.write_text("timing:\n  precision: 0.05\n  precision_cap_s: 4\n")
    timing = config_from_args(["--config", str(cfg)]).cfg.timing
    assert timing.precision == 0.05 and timing.precision_cap_s == 4
    assert TimingConfig().precision == 0.02
    assert run(measure.main, ["--model", "tiny_cnn", "--precision", "2"]) == 2
    err = capsys.readouterr().err
    assert "precision must be a fraction" in err and len(err.strip().splitlines()) == 1


def test_long_runs_are_timed_in_blocks_of_fewer_runs():
    """A block aims at ``block_s`` (0.15 s): runs of about 3 ms keep blocks of ``block``
    (3), runs of about 200 ms are timed one per block, and ``block_s`` 0 keeps 3 always."""
    from envs.timing import block_runs

    t = TimingConfig()
    assert (t.block, t.block_s) == (3, 0.15)
    assert [block_runs(t, s) for s in (0.003, 0.05, 0.07, 0.11, 0.2, 2.0)] == [3, 3, 2, 1, 1, 1]
    assert block_runs(t, None) == 3 and block_runs(replace(t, block_s=0.0), 0.2) == 3
    base = replace(t, warmup_agree=0.0, precision=0.0, repeats=5)
    g = chain()
    slow = replace(g, compute_s=g.compute_s * 50)          # about 150-200 ms a run
    placement = np.array([0, 1, 0])
    for graph, fixed, runs in ((g, False, 3), (slow, False, 1), (slow, True, 3)):
        timing = replace(base, block_s=0.0) if fixed else base
        m = NoisySimulatorBackend(graph, timing, sigma=0.01, seed=0).measure_array(placement)
        assert m.info["block_runs"] == runs
        assert m.runs == 5                                   # five blocks (samples) ...
        assert m.info["timed_s"] == pytest.approx(5 * runs * m.latency_s, rel=0.1)  # of `runs` runs each


def test_block_s_must_not_be_negative():
    with pytest.raises(ValueError, match="block_s must be 0"):
        TimingConfig(block_s=-1.0)
