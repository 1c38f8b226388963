"""The prepared GPU check runs end to end without a GPU, the CPU's bfloat16 device standing in.

``bench/gpu_check.sh`` is what a machine with an NVIDIA GPU runs (docs/results/gpu-check.md);
here it runs verbatim with ``--gpu cpu:bf16 --quick`` and must write every section's figures
as JSON and markdown, without importing OpenVINO or Ray.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_gpu_check_runs_end_to_end_on_the_cpu(tmp_path):
    out = tmp_path / "figures"
    proc = subprocess.run(["bash", "bench/gpu_check.sh", str(out), "--gpu", "cpu:bf16", "--quick"],
                          cwd=ROOT, capture_output=True, text=True, timeout=480)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads((out / "gpu_check.json").read_text())
    fid = data["sections"]["fidelity"]
    assert len(fid) == 2 and all(f["placements"] >= 10 for f in fid)
    assert all(-1.0 <= f["spearman_simulator"] <= 1.0 for f in fid)
    rows = data["sections"]["capped"]["rows"]
    # the whole model does not fit the capped device: a failed measurement, never a crash
    assert rows["gpu_only"]["ok"] is False and "memory" in rows["gpu_only"]["error"]
    assert math.isfinite(rows["cpu_only"]["latency_s"])
    for method in ("refit", "hsdag"):
        assert 0 < rows[method]["measured"] <= 40
        assert math.isfinite(rows[method]["found_s"])
    assert "accelerate_auto" in rows
    thr = data["sections"]["throughput"]
    assert thr["throughput"]["time_per_sample_s"] <= thr["sequential"]["time_per_sample_s"] * (1 + 1e-6)
    md = (out / "gpu_check.md").read_text()
    for heading in ("Simulator fidelity", "does not fit the capped GPU", "Throughput objective"):
        assert heading in md


@pytest.mark.slow  # tests/test_inprocess.py checks the same imports in CI after running HSDAG and refit
def test_the_gpu_check_needs_neither_openvino_nor_ray():
    code = ("import sys, bench.gpu_check, hsdag_ray.inprocess, envs.pytorch.backend, "
            "envs.profiling, envs.simulator, policies.hsdag.local; "
            "assert not {'openvino', 'ray', 'wandb'} & set(m.split('.')[0] for m in sys.modules), "
            "sorted(m for m in sys.modules if m.split('.')[0] in ('openvino', 'ray', 'wandb'))[:5]")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
