import pytest
import pytest

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process
"""GDP trained end to end through ``train`` with RLlib's PPO: it learns and writes every output."""
import json

import numpy as np
import torch

from hsdag_ray.run.config import TrainConfig
from hsdag_ray.run.training import train


def sampled_mean_latency(module, env, sim, samples: int = 200, seed: int = 0) -> float:
    """Mean simulated latency of placements sampled from the policy (one shot each)."""
    torch.manual_seed(seed)
    obs = {k: torch.as_tensor(v)[None].expand(samples, *v.shape) for k, v in env.reset()[0].items()}
    with torch.no_grad():
        inputs = module.forward_exploration({"obs": obs})["action_dist_inputs"]
        placements = module.action_dist_cls.from_logits(inputs).sample().numpy()
    n = env.graph.num_nodes
    return float(np.mean([sim.evaluate(p[:n]).value for p in placements]))


@pytest.mark.slow
def test_gdp_learns_and_writes_every_output(tiny_profile_file, tmp_path):
    """tiny_cnn on a modeled CPU and accelerator, 360 placements: a random placement pays many
    stage boundaries; the policy learns to keep the nodes together (the profile is modeled, the same on every machine; the
    test passes with seeds 0-4)."""
    from envs.placement_env import PlacementEnv
    from envs.simulator import Simulator
    from hsdag_core.device_profile import Profile, cost_graph

    prof = Profile.load(tiny_profile_file)
    probe = PlacementEnv({"model": "tiny_cnn", "backend": "simulator", "profile": prof.to_json(),
                          "measure_reference": False})
    sim = Simulator(cost_graph(probe.graph, prof, probe.devices))
    means: list[float] = []
    cfg = TrainConfig.of(model="tiny_cnn", method="gdp", backend="simulator", profile=str(tiny_profile_file),
                      budget=360, env_runners=0, wandb="offline", out=str(tmp_path), name="gdp",
                      seed=0)

    def probe_policy(algo, row) -> None:
        if row["iteration"] == 1 or row["placements"] >= cfg.run.budget:
            means.append(sampled_mean_latency(algo.get_module(), probe, sim))

    s = train(cfg, quiet=True, on_iteration=probe_policy)
    run = tmp_path / "gdp"
    for f in ("config.json", "metrics.jsonl", "best_placement.json", "learning_curve.png",
              "placement.png", "summary.json", "checkpoint"):
        assert (run / f).exists(), f
    assert list((run / "wandb").glob("offline-run-*")), "W&B offline run folder"
    assert json.loads((run / "config.json").read_text())["resolved"]["algo"] == "ppo"
    assert s["method"] == "gdp" and s["placements"] >= 360
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    # an iteration is episodes_per_iteration episodes of episode_len one-shot placements
    per_iteration = cfg.learning.episode_len * cfg.learning.episodes_per_iteration
    assert [r["placements"] for r in rows] == [per_iteration * (i + 1) for i in range(len(rows))]
    assert s["baselines"]["optimum"] <= s["best_latency_s"] * (1 + 1e-9)
    # the best is far better than a random placement on average
    n = probe.graph.num_nodes
    rng = np.random.default_rng(0)
    random_mean = np.mean([sim.evaluate(rng.integers(0, 2, n)).value for _ in range(300)])
    assert s["best_latency_s"] < 0.5 * random_mean
    # the policy learned: what it samples got clearly faster than after the first update
    assert means[-1] < 0.6 * means[0], means


@pytest.mark.slow
def test_gdp_pretrains_on_a_family_and_places_a_held_out_graph_zero_shot(tmp_path):
    """The network has no size-dependent parameter: pre-trained on the tiny family (padded to
    its largest graph), it places a held-out graph padded to its own size."""
    from hsdag_ray.run.pretraining import pretrain
    from hsdag_ray.run.pretrained import read_pretrained

    out = tmp_path / "tiny-gdp"
    pretrain(TrainConfig.of(method="gdp", budget=40, episode_len=5, env_runners=0, hidden_dim=16,
                         seed=0), "tiny", out, say=lambda s: None)
    assert read_pretrained(out)["method"] == "gdp"
    graphs = json.loads((out / "graphs.json").read_text())
    held = graphs["held_out"][0]
    s = train(TrainConfig.of(model=held["spec"], backend="simulator", devices=list(graphs["devices"]),
                          profile=held["profile"], method="gdp", init=str(out), budget=0,
                          env_runners=0, hidden_dim=16, episode_len=5, wandb="disabled",
                          out=str(tmp_path), name="zs"), quiet=True)
    assert s["placements"] == 1 and s["measurements"] == 1
    assert s["method_best_latency_s"] > 0
