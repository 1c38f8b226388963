"""The prepared GPU check runs end to end without a GPU, the CPU in float32 on one thread
standing in.

``bench/gpu_check.sh`` is what a machine with an NVIDIA GPU runs (docs/results/gpu-check.md);
here it runs verbatim as documented, ``--gpu cpu:threads=1 --size tiny`` (every section and
method once on the smallest models), and must write every section's figures as JSON and
markdown, end with a verdict per section, and import neither OpenVINO nor Ray.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from bench.gpu_check.offload import _speedups, judge

ROOT = Path(__file__).resolve().parents[1]


def test_speed_ups_over_accelerate_are_called_only_beyond_the_noise():
    row = {"rows": {
        "accelerate_sequential": {"ok": True, "latency_s": 2.0, "interval_s": [1.9, 2.1]},
        "accelerate_balanced": {"ok": True, "latency_s": 2.2, "interval_s": [2.0, 2.4]},
        "refit": {"ok": True, "latency_s": 1.0, "interval_s": [0.95, 1.05]},
        "anneal": {"ok": True, "latency_s": 1.9, "interval_s": [1.7, 2.0]},
        "hsdag": {"ok": False, "error": "memory"}}}
    _speedups(row)
    rows = row["rows"]
    assert row["accelerate_best"] == "accelerate_sequential"
    assert rows["refit"]["vs_accelerate"] == "faster" and rows["refit"]["speedup"] == pytest.approx(2.0)
    assert rows["refit"]["speedup_interval"] == pytest.approx((1.9 / 1.05, 2.1 / 0.95))
    assert rows["anneal"]["vs_accelerate"] == "within the noise"
    fig = [{"model": "m", "caps": [dict(row, share=0.4)]}]
    assert judge(fig).startswith("met:") and "refit on m at 40%" in judge(fig)
    rows["refit"].update(latency_s=1.8, interval_s=[1.5, 1.95])
    _speedups(row)
    assert judge(fig).startswith("not met:")


def test_the_gpu_check_runs_end_to_end_on_the_cpu(tmp_path):
    """``bash bench/gpu_check.sh OUT --gpu cpu:threads=1 --size tiny`` as
    docs/results/gpu-check.md gives it: every section measures and ends in a verdict. The
    stand-in computes in float32, so the check costs about the same whether or not the CPU
    has native bfloat16."""
    out = tmp_path / "figures"
    proc = subprocess.run(["bash", "bench/gpu_check.sh", str(out), "--gpu", "cpu:threads=1",
                           "--size", "tiny"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads((out / "gpu_check.json").read_text())
    assert data["size"] == "tiny"
    for f in data["sections"]["offload"]:
        assert [c["share"] for c in f["caps"]] == [0.4, 0.8]
        for c in f["caps"]:
            cpu = c["rows"]["cpu_only"]
            assert cpu["interval_s"][0] <= cpu["latency_s"] <= cpu["interval_s"][1]
            for method in ("refit", "anneal", "hsdag"):
                assert 0 < c["rows"][method]["measured"] <= f["budget"]
    fid = data["sections"]["fidelity"]
    assert all(f["placements"] >= 8 and -1.0 <= f["spearman_simulator"] <= 1.0 for f in fid)
    assert all(math.isfinite(f["mean_abs_error"]) for f in fid)
    assert all(s["per_second"] > 0 for s in data["sections"]["speed"])
    tail = proc.stdout.strip().splitlines()[-3:]
    assert [line.split(":")[0] for line in tail] == ["offload", "fidelity", "speed"]
    assert all(line.split(": ")[1] in ("met", "not met") for line in tail)
    md = (out / "gpu_check.md").read_text()
    for heading in ("The offload case", "Simulator fidelity", "Speed of real measurement", "scaled down"):
        assert heading in md


@pytest.mark.slow  # tests/test_inprocess.py checks the same imports in CI after running HSDAG and refit
def test_the_gpu_check_needs_neither_openvino_nor_ray():
    code = ("import sys, bench.gpu_check.run, hsdag_ray.run.inprocess, envs.pytorch.backend, "
            "envs.profiling, envs.simulator, policies.hsdag.local, envs.measuring_service; "
            "assert not {'openvino', 'ray', 'wandb'} & set(m.split('.')[0] for m in sys.modules), "
            "sorted(m for m in sys.modules if m.split('.')[0] in ('openvino', 'ray', 'wandb'))[:5]")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_re_measurement_stops_early_once_every_interval_is_tight():
    from bench.gpu_check.common import remeasure_until
    from envs.base import Measurement

    calls = []

    def measure(p):
        calls.append(p)
        if p == "big":
            return Measurement.failure("torch", "memory", "too big")
        spread = 0.001 if p != "noisy" else 0.2  # relative step between a measurement's blocks
        return Measurement(ok=True, latency_s=1.0, samples_s=[1.0 + spread * i for i in range(4)])

    tight = remeasure_until(measure, {"a": "a", "b": "b", "x": "big"}, rounds=3)
    assert tight["a"]["rounds"] == 2 and tight["a"]["half_width"] <= 0.02
    assert tight["x"]["ok"] is False and "memory" in tight["x"]["error"]
    assert calls.count("big") == 1  # a failed candidate is not measured again
    loose = remeasure_until(measure, {"a": "a", "n": "noisy"}, rounds=3)
    assert loose["n"]["rounds"] == 3 and loose["n"]["interval_s"][0] <= loose["n"]["latency_s"]
