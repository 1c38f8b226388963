"""A timing's 95% interval (envs.intervals): exact order statistics, coverage on seeded
draws, the comparison's words, and the interval where every real timing is reported."""
from __future__ import annotations

import json
import time

import numpy as np
import pytest

from envs.base import Measurement, TimingConfig
from envs.intervals import WITHIN_NOISE, compare, interval_fields, median_interval, speedup_interval
from envs.measuring_service import remeasure
from envs.timing import time_runs


def test_order_statistics_of_a_hand_made_sample():
    # n = 10: [x(2), x(9)] covers the median with 1 - 2 * (1 + 10) / 1024; [x(3), x(8)] only 0.89
    low, high, cov = median_interval([7, 3, 9, 1, 10, 2, 8, 4, 6, 5])
    assert (low, high) == (2, 9) and cov == pytest.approx(1 - 2 * 11 / 1024)
    # n = 5: no pair reaches 95%, so the full range with its own coverage (1 - 2 / 32)
    low, high, cov = median_interval([5.0, 1.0, 4.0, 2.0, 3.0])
    assert (low, high) == (1.0, 5.0) and cov == pytest.approx(1 - 2 / 32)
    # n = 30: k = 10 is the last index whose coverage reaches 95%
    low, high, cov = median_interval(list(range(1, 31)))
    assert (low, high) == (10, 21) and 0.95 <= cov < 0.98


def test_about_95_percent_of_intervals_cover_the_true_median():
    rng = np.random.default_rng(0)
    true_median = 1.0  # of a lognormal with mu = 0: skewed like timing noise
    hits = []
    for _ in range(1500):
        low, high, _ = median_interval(rng.lognormal(0.0, 0.5, size=15))
        hits.append(low <= true_median <= high)
    # exact coverage for n = 15 is 1 - 2 * P(B <= 3) = 0.965
    assert 0.945 <= np.mean(hits) <= 0.985


def test_comparisons_say_within_the_noise_when_intervals_overlap():
    assert compare([1.0, 2.0], [1.5, 3.0]) == WITHIN_NOISE == "within the noise"
    assert compare([1.0, 2.0], [2.1, 3.0]) == "faster"
    assert compare([2.1, 3.0], [1.0, 2.0]) == "slower"
    assert compare(None, [1.0, 2.0]) == WITHIN_NOISE
    assert speedup_interval([1.0, 2.0], [4.0, 6.0]) == (2.0, 6.0)


def test_a_measurement_carries_its_interval():
    m = Measurement(ok=True, latency_s=2.0, samples_s=[1.0, 2.0, 3.0, 2.0, 2.5, 1.5, 2.2])
    assert m.interval_s[0] <= m.latency_s <= m.interval_s[1] and m.interval_level > 0.95
    assert m.to_dict()["interval_s"] == m.interval_s and m.half_width == pytest.approx(0.5)
    assert Measurement.failure("torch", "memory", "too big").interval_s is None
    assert interval_fields([])["interval_s"] is None


def test_remeasured_rounds_pool_their_blocks_into_one_interval():
    samples = iter([[1.0, 1.1, 0.9], [1.05, 0.95, 1.0], [1.2, 1.0, 1.1], [2.0, 2.1, 2.2]] * 3)

    def measure(_):
        s = next(samples)
        return {"ok": True, "latency_s": float(np.median(s)), "samples_s": s}

    out = remeasure(measure, {"a": None, "b": None}, rounds=3)
    for row in out.values():
        assert row["interval_s"][0] <= row["latency_s"] <= row["interval_s"][1]
        assert row["interval_level"] > 0.95  # 9 pooled blocks, not 3 rounds


class _Runner:
    """A runner whose runs take about a millisecond."""

    def __init__(self):
        self.calls = 0

    def infer(self):
        time.sleep(0.001)
        self.calls += 1


def test_unraced_warm_up_runs_until_two_runs_agree():
    def warmup_runs(agree: float, best=None) -> int:
        info: dict = {}
        timing = TimingConfig(warmup=1, warmup_agree=agree, warmup_max=5, repeats=1, block=1, precision=0)
        time_runs(_Runner(), timing, 0, time.perf_counter() + 30, info, best=best)
        return info["warmup_runs"]

    assert warmup_runs(1e-12) == 5  # no two runs agree that closely: up to warmup_max
    assert warmup_runs(1e3) == 2    # the first pair agrees: the first run is compared with the second
    assert warmup_runs(1e-12, best=1.0) == 1  # a raced placement keeps its fixed warm-up
    assert warmup_runs(0.0) == 1    # off


def test_measure_json_gives_the_median_inside_its_interval_and_says_when_the_cap_stopped_it(capsys):
    from hsdag_ray.measure import main
    from envs.timing import precision_words

    assert main(["--model", "tiny_cnn", "--backend", "torch", "--devices", "cpu,cpu:bf16",
                 "--placement", "split:0.5", "--json", "--warmup", "1", "--repeats", "6",
                 "--block", "1", "--precision", "0.0001", "--precision-cap-s", "0.05"]) == 0
    out = json.loads(capsys.readouterr().out)
    low, high = out["interval_s"]
    assert low <= out["latency_s"] <= high and low <= high
    assert out["measurement"]["interval_s"] == [low, high]
    # a target of +/-0.01% is out of reach in 0.05 s of blocks: the cap stops it, and says so
    p = out["precision"]
    assert p["capped"] and p["target"] == 0.0001 and p["reached"] > p["target"]
    assert out["measurement"]["info"]["precision"] == p
    assert "0.05 s time cap stopped it" in precision_words(out["measurement"]["info"])


def test_the_run_table_and_the_sweep_table_say_within_the_noise():
    from rich.console import Console

    from hsdag_ray.console import result_table
    from hsdag_ray.run.results import markdown, rows_from_summary

    summary = {"model": "m", "method": "hsdag", "backend": "pipeline", "devices": ["CPU", "CPU_F32"],
               "best_source": "learner", "seed": 0, "method_best_latency_s": 0.0100,
               "best_latency_s": 0.0100, "best_interval_s": [0.0095, 0.0106],
               "baselines": {"CPU_only": 0.0104, "CPU_F32_only": 0.0200},
               "remeasured": {"candidates": {"CPU_only": {"interval_s": [0.0100, 0.0110]},
                                             "CPU_F32_only": {"interval_s": [0.0190, 0.0210]}}}}
    console = Console(width=120, record=True)
    console.print(result_table(summary))
    text = console.export_text()
    best = next(line for line in text.splitlines() if "best found" in line)
    f32 = next(line for line in text.splitlines() if "CPU_F32_only" in line)
    assert "within the noise" in best and "9.500-10.600 ms" in best
    assert "slower" in f32 and "noise" not in f32
    row = dict(rows_from_summary(summary), kind="run")
    assert row["vs_cpu"] == "within the noise"
    assert "(within the noise)" in markdown([row]).splitlines()[-1]
