"""Placeto trained end to end through ``train``: it learns, writes HSDAG's outputs, runs on devices."""
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from hsdag_ray.run.config import TrainConfig
from hsdag_ray.run.training import train

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process


def sampled_episode_ends(module, env, episodes: int = 10, seed: int = 0) -> float:
    """Mean runtime the policy's sampled episodes end at, from the env's initial placement."""
    gen = torch.Generator().manual_seed(seed)
    ends = []
    for _ in range(episodes):
        obs, _ = env.reset()
        done = False
        while not done:
            batch = {"obs": {k: torch.as_tensor(v)[None] for k, v in obs.items()}}
            with torch.no_grad():
                logits = module.forward_exploration(batch)["action_dist_inputs"][0]
            action = int(torch.multinomial(torch.softmax(logits, -1), 1, generator=gen))
            obs, _, done, _, _ = env.step(action)
        ends.append(env.runtime_s)
    return float(np.mean(ends))


@pytest.mark.slow
def test_placeto_learns_and_writes_every_output(tiny_profile_file, tmp_path):
    """tiny_cnn on a modeled CPU and accelerator, 40 episodes: a random placement pays many stage
    boundaries; the policy learns to keep neighbours together. The profile is modeled, the same
    on every machine; the test passes with seeds 0-4."""
    from envs.placeto_env import PlacetoEnv
    from envs.simulator import Simulator
    from hsdag_core.device_profile import Profile, cost_graph

    prof = Profile.load(tiny_profile_file)
    probe = PlacetoEnv({"model": "tiny_cnn", "backend": "simulator", "profile": prof.to_json()})
    ends: list[float] = []
    cfg = TrainConfig.of(model="tiny_cnn", method="placeto", backend="simulator",
                      profile=str(tiny_profile_file), budget=360, env_runners=0, wandb="offline",
                      out=str(tmp_path), name="placeto", seed=0, lr=3e-3)

    def probe_policy(algo, row) -> None:
        if row["iteration"] == 1 or row["placements"] >= cfg.run.budget:
            ends.append(sampled_episode_ends(algo.get_module(), probe))

    s = train(cfg, quiet=True, on_iteration=probe_policy)
    run = tmp_path / "placeto"
    for f in ("config.json", "metrics.jsonl", "best_placement.json", "learning_curve.png",
              "placement.png", "summary.json", "checkpoint"):
        assert (run / f).exists(), f
    assert list((run / "wandb").glob("offline-run-*")), "W&B offline run folder"
    assert s["method"] == "placeto" and s["placements"] >= 360
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    n = probe.graph.num_nodes
    # an iteration is one episode of n placements, each counted
    assert [r["placements"] for r in rows] == [n * (i + 1) for i in range(len(rows))]
    b = s["baselines"]
    assert b["optimum"] <= s["best_latency_s"] * (1 + 1e-9)
    # the best is clearly better than a random placement on average
    sim = Simulator(cost_graph(probe.graph, prof, probe.devices))
    rng = np.random.default_rng(0)
    random_mean = np.mean([sim.evaluate(rng.integers(0, 2, n)).value for _ in range(300)])
    assert s["best_latency_s"] < 0.5 * random_mean
    # the policy learned: its sampled episodes (from the same random start) end at less than
    # half the runtime they ended at after the first update, when it was still near uniform
    assert ends[-1] < 0.5 * ends[0], ends
    assert rows[-1]["entropy"] < 0.5 * rows[0]["entropy"]


@pytest.mark.slow  # about a minute; real OpenVINO runs from the command line stay in CI in test_train.py
def test_placeto_on_real_devices_from_the_command_line(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "hsdag_ray.train", "--method", "placeto", "--model", "tiny_cnn",
         "--backend", "auto", "--devices", "CPU,CPU_F32", "--budget", "18", "--repeats", "3", "--precision", "0",
         "--wandb", "disabled", "--out", str(tmp_path), "--name", "real"],
        capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads((tmp_path / "real" / "summary.json").read_text())
    assert s["method"] == "placeto" and s["backend"] == "openvino-auto"
    assert s["objective"] == "measured" and s["failures"] == 0
    assert s["placements"] >= 18 and 1 <= s["measurements"] <= s["placements"]
    assert set(s["baselines"]) >= {"CPU_only", "CPU_F32_only", "openvino_auto"}
    # the result is re-measured next to the baselines, within the noise of the raw minimum
    assert s["remeasured"]["rounds"] >= 1 and "method#1" in s["remeasured"]["candidates"]
    assert 0.5 * s["best_raw_latency_s"] < s["method_best_latency_s"] < 2.0 * s["best_raw_latency_s"]
    for f in ("best_placement.json", "learning_curve.png", "placement.png", "checkpoint"):
        assert (tmp_path / "real" / f).exists(), f
