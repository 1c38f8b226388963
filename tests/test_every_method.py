"""Every registered method runs through ``train`` end to end: a small run of each on the
simulator (tiny_cnn; a modeled CPU and accelerator, and four devices: a CPU, two
accelerators that differ in memory and an NPU-like one), as published, with the run's
outputs, a consistent store and a best placement on the run's devices. The per-method
learning tests (``-m slow``) check that each learns; this one checks that none is broken."""
from __future__ import annotations

import json

import pytest

from hsdag_ray.config import TrainConfig
from hsdag_ray.train import train
from policies.registry import METHODS

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process


#: every method on four devices; the learned ones on two as well (the searches and solvers
#: run on two devices in their own tests)
CASES = [(m, n) for m in sorted(METHODS) for n in ((2, 4) if METHODS[m].kind == "rl" else (4,))]


@pytest.mark.parametrize("method,devices", CASES)
def test_every_method_runs_through_train(method, devices, tmp_path, tiny_profile_file,
                                         four_device_profile):
    kind = METHODS[method].kind
    profile = tiny_profile_file if devices == 2 else four_device_profile
    cfg = TrainConfig.of(model="tiny_cnn", method=method, backend="simulator",
                      profile=str(profile), budget=20, episode_len=5, env_runners=0,
                      hidden_dim=16, wandb="disabled", out=str(tmp_path), name=method, seed=0)
    s = train(cfg, quiet=True)
    run = tmp_path / method
    for f in ("config.json", "metrics.jsonl", "best_placement.json", "summary.json", "store.json"):
        assert (run / f).exists(), f
    assert s["method"] == method and s["guided_by"] == []
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == list(range(1, len(rows) + 1))
    store = json.loads((run / "store.json").read_text())
    assert s["measurements"] == len(store["log"]) == rows[-1]["measurements"]
    if kind == "solver":  # one placement, planned once and measured once
        assert s["measurements"] == 1
    else:
        assert s["placements"] >= 20 and s["measurements"] >= 1
    assert len(s["devices"]) == devices
    best = json.loads((run / "best_placement.json").read_text())
    assert best and set(best.values()) <= set(s["devices"])
    # the run's best is what it measured, and never slower than its first measurement
    lat = [x for x in json.loads((run / "state.json").read_text())["latencies"] if x is not None]
    assert s["method_best_latency_s"] == pytest.approx(min(lat)) and min(lat) <= lat[0]
    assert s["baselines"]["optimum"] <= s["best_latency_s"] * (1 + 1e-9)
