"""The RNN placer trained end to end through ``train``: it learns, writes HSDAG's outputs, runs on devices."""
import json
import subprocess
import sys

import numpy as np
import pytest

from hsdag_ray.run.config import TrainConfig
from hsdag_ray.run.training import train

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process


@pytest.mark.slow
def test_rnn_learns_and_writes_every_output(tiny_profile_file, tmp_path):
    """tiny_cnn on a modeled CPU and accelerator, 400 placements: the run's best is clearly
    better than a random placement, and so are the placements the final policy samples
    (the profile is modeled, the same on every machine;
    the test passes with seeds 0-4)."""
    from envs.placement_env import PlacementEnv
    from envs.simulator import Simulator
    from hsdag_core.device_profile import Profile, cost_graph

    import torch
    from ray.rllib.core.columns import Columns

    prof = Profile.load(tiny_profile_file)
    probe = PlacementEnv({"model": "tiny_cnn", "backend": "simulator", "profile": prof.to_json(),
                          "measure_reference": False})
    n = probe.graph.num_nodes
    sim = Simulator(cost_graph(probe.graph, prof, probe.devices))
    obs = {k: torch.as_tensor(v)[None].repeat(50, *([1] * np.ndim(v))) for k, v in probe.reset()[0].items()}
    sampled: list[float] = []
    cfg = TrainConfig.of(model="tiny_cnn", method="rnn", backend="simulator",
                      profile=str(tiny_profile_file), budget=400, env_runners=0, wandb="offline",
                      out=str(tmp_path), name="rnn", seed=0, lr=3e-3)

    def probe_policy(algo, row) -> None:
        if row["iteration"] == 1 or row["placements"] >= cfg.run.budget:
            with torch.no_grad():
                actions = algo.get_module().forward_exploration({Columns.OBS: obs})[Columns.ACTIONS]
            sampled.append(float(np.mean([sim.evaluate(a[:n].numpy()).value for a in actions])))

    s = train(cfg, quiet=True, on_iteration=probe_policy)
    run = tmp_path / "rnn"
    for f in ("config.json", "metrics.jsonl", "best_placement.json", "learning_curve.png",
              "placement.png", "summary.json", "checkpoint"):
        assert (run / f).exists(), f
    assert list((run / "wandb").glob("offline-run-*")), "W&B offline run folder"
    assert s["method"] == "rnn" and s["placements"] >= 400
    assert json.loads((run / "config.json").read_text())["resolved"]["reward"] == "neg_sqrt"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    # an iteration is episodes_per_iteration episodes of episode_len whole placements, each counted
    per_iteration = cfg.learning.episode_len * cfg.learning.episodes_per_iteration
    assert [r["placements"] for r in rows] == [per_iteration * (i + 1) for i in range(len(rows))]
    b = s["baselines"]
    assert b["optimum"] <= s["best_latency_s"] * (1 + 1e-9)
    rng = np.random.default_rng(0)
    random_mean = np.mean([sim.evaluate(rng.integers(0, 2, n)).value for _ in range(300)])
    assert s["best_latency_s"] < 0.5 * random_mean
    assert s["method_best_latency_s"] < 0.5 * random_mean
    # the policy learned: what it samples at the end is much faster than after one update
    assert sampled[-1] < 0.5 * sampled[0] and sampled[-1] < 0.5 * random_mean, sampled
    assert rows[-1]["entropy"] < 0.5 * rows[0]["entropy"]


@pytest.mark.slow  # about a minute; real OpenVINO runs from the command line stay in CI in test_train.py
def test_rnn_on_real_devices_from_the_command_line(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "hsdag_ray.train", "--method", "rnn", "--model", "tiny_cnn",
         "--backend", "auto", "--devices", "CPU,CPU_F32", "--budget", "20", "--episode-len", "10",
         "--repeats", "3", "--precision", "0", "--wandb", "disabled", "--out", str(tmp_path), "--name", "real"],
        capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads((tmp_path / "real" / "summary.json").read_text())
    assert s["method"] == "rnn" and s["backend"] == "openvino-auto"
    assert s["objective"] == "measured" and s["failures"] == 0
    assert s["placements"] >= 20 and 1 <= s["measurements"] <= s["placements"]
    assert set(s["baselines"]) >= {"CPU_only", "CPU_F32_only", "openvino_auto"}
    assert s["remeasured"]["rounds"] >= 1 and "method#1" in s["remeasured"]["candidates"]
    for f in ("best_placement.json", "learning_curve.png", "placement.png", "checkpoint"):
        assert (tmp_path / "real" / f).exists(), f
