"""Every registered method runs through ``train`` end to end: a small run of each on the
simulator (tiny_cnn; a modeled CPU and accelerator, and four devices: a CPU, two
accelerators that differ in memory and an NPU-like one), as published, with the run's
outputs, a consistent store and a best placement on the run's devices. The per-method
learning tests (``-m slow``) check that each learns; this one checks that none is broken."""
from __future__ import annotations

import json
import math

import pytest

from hsdag_ray.run.config import TrainConfig
from hsdag_ray.run.training import train
from policies.registry import METHODS

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process


#: every method on four devices; the learned ones on two as well (the searches and solvers
#: run on two devices in their own tests)
CASES = [(m, n) for m in sorted(METHODS) for n in ((2, 4) if METHODS[m].approach == "rl" else (4,))]


@pytest.mark.parametrize("method,devices", CASES)
def test_every_method_runs_through_train(method, devices, tmp_path, tiny_profile_file,
                                         four_device_profile):
    approach = METHODS[method].approach
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
    if approach == "solver":  # one placement, planned once and measured once
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


#: what an in-process run needs beside the method's own settings (GDP trains with PPO as
#: published; in-process runs train by REINFORCE)
INPROCESS_SETTINGS = {"gdp": {"algo": "reinforce"}}
#: learned methods in-process runs refuse, and why (docs/architecture.md, "In one process")
NOT_INPROCESS = {"placeto": "acts in its own environment"}


@pytest.mark.parametrize("method", sorted(m for m in METHODS if METHODS[m].approach == "rl"))
def test_every_learned_method_runs_in_process(method):
    """Every learned method trains in this process on the simulator with a tiny budget
    (its REINFORCE updates through policies.reinforce_core), or is refused in one
    sentence naming the command that runs it."""
    from envs.graph_backend import make_backend
    from hsdag_core.device_profile import cost_graph
    from hsdag_ray.run.inprocess import run_method
    from test_inprocess import crossed_profile, layered_cnn

    graph = layered_cnn(8, c=16, size=16)
    prof = crossed_profile(graph, accelerator_memory=0.5)
    backend = make_backend("simulator", graph, profile=prof)
    costs = cost_graph(graph, prof, backend.devices)
    settings = {"episode_len": 4, "hidden_dim": 16, **INPROCESS_SETTINGS.get(method, {})}

    def run():
        return run_method(method, graph, backend, costs, budget=8, seed=0, settings=settings,
                          say=lambda _: None, progress=False)

    if method in NOT_INPROCESS:
        with pytest.raises(ValueError, match=NOT_INPROCESS[method]) as refused:
            run()
        message = str(refused.value)
        assert f"python -m hsdag_ray.train --method {method}" in message and message.count(". ") == 0
        return
    r = run()
    assert r["approach"] == "rl" and r["iterations"] >= 1 and r["measured"] == len(r["curve"]) <= 8
    assert r["failures"] == 0 and r["latency_s"] == min(r["curve"])
    assert math.isfinite(r["last_update"]["policy_loss"])
    assert set(r["placement"]) <= set(range(len(backend.devices)))
    if method in INPROCESS_SETTINGS:  # as published, refused with the setting that runs it
        with pytest.raises(ValueError, match="settings=.*'algo': 'reinforce'"):
            run_method(method, graph, backend, costs, budget=8, say=lambda _: None)
