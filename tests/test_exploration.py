"""Exploration options of HSDAG: the grouping as a sampled action (``--sampled-grouping``)
and what a run does once its best stops improving (``--stall-patience``)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns

from envs.observation import pad_graph_observation, placement_spaces
from policies.hsdag.edge_draws import partner_logp, sample_partners
from policies.hsdag.module import GROUPING_LOGP, GROUPING_PARTNER, HSDAGRLModule

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process

# 0-1, 1-2, 1-3, 2-3 and a parallel 0->1: node 1 has four incident edges, two to node 0
EDGES = torch.tensor([[0, 1, 1, 2, 0], [1, 2, 3, 3, 1]])


def test_partner_logp_is_the_frequency_of_the_draws():
    torch.manual_seed(0)
    logits = torch.tensor([0.5, -1.0, 2.0, 0.0, 0.5])
    draws = torch.stack([sample_partners(EDGES, logits, 4, 0.7)[1] for _ in range(6000)])
    expected = partner_logp(EDGES, logits, torch.tensor([1, 0, 1, 1]), 0.7).exp()
    for node, partner in enumerate([1, 0, 3, 1]):  # the partner whose frequency is checked
        freq = float((draws[:, node] == partner).float().mean())
        p = float(partner_logp(EDGES, logits, torch.full((4,), partner), 0.7).exp()[node])
        assert abs(freq - p) < 0.025, (node, partner, freq, p)
    assert expected[0] == pytest.approx(1.0)  # node 0's only neighbour is node 1
    # node 1's probabilities over its partners 0 (two edges), 2 and 3 sum to one
    total = sum(float(partner_logp(EDGES, logits, torch.full((4,), q), 0.7).exp()[1])
                for q in (0, 2, 3))
    assert total == pytest.approx(1.0, abs=1e-5)


def test_a_lower_temperature_concentrates_the_draws():
    logits = torch.tensor([0.5, -1.0, 2.0, 0.0, 0.5])
    best = torch.full((4,), 3)  # node 1's strongest edge (logit 2.0) goes to node 3
    hot, cold = (float(partner_logp(EDGES, logits, best, t).exp()[1]) for t in (3.0, 0.3))
    assert cold > 0.9 > hot


def make_module(**model_config) -> HSDAGRLModule:
    obs_space, act_space = placement_spaces(10, 12, 3, 2)
    return HSDAGRLModule(observation_space=obs_space, action_space=act_space,
                         model_config={"hidden_dim": 16, "node_moves": True, "grouping_noise": 0.5,
                                       **model_config})


def observations():
    rng = np.random.default_rng(0)
    g1 = pad_graph_observation(rng.normal(size=(6, 3)), [[0, 1, 2, 0, 3, 4], [1, 2, 5, 3, 4, 5]], 10, 12)
    g2 = pad_graph_observation(rng.normal(size=(8, 3)), [list(range(7)), list(range(1, 8))], 10, 12)
    return {k: torch.as_tensor(np.stack([g1[k], g2[k]])) for k in g1}


def test_the_learner_gets_the_sampled_groupings_logp_with_gradients():
    torch.manual_seed(0)
    module = make_module(sampled_grouping=True)
    obs = observations()
    with torch.no_grad():
        sampled = module.forward_exploration({Columns.OBS: obs})
    partners = sampled[GROUPING_PARTNER]
    assert partners.shape == (2, 10)
    assert bool((partners[0, 6:] == -1).all()) and bool((partners[1, 8:] == -1).all())  # padding
    assert bool((partners[0, :6] >= 0).all()) and bool((partners[1, :8] >= 0).all())
    # each partner is a neighbour in the node's own graph (local ids)
    ei = obs["edge_index"][1][:, obs["edge_mask"][1] > 0.5]
    for v in range(8):
        u = int(partners[1, v])
        assert bool(((ei[0] == v) & (ei[1] == u) | (ei[0] == u) & (ei[1] == v)).any())

    batch = {Columns.OBS: obs, Columns.ACTION_DIST_INPUTS: sampled[Columns.ACTION_DIST_INPUTS],
             GROUPING_PARTNER: partners}
    train = module.forward_train(batch)
    logp = train[GROUPING_LOGP]
    assert logp.shape == (2,) and bool((logp < 0).all())
    logp.sum().backward()
    # (the scorer's last bias shifts every logit alike: a softmax ignores it)
    grads = [p.grad for p in module.net.pool.score_mlp.parameters() if p.dim() == 2]
    assert grads and all(g is not None and float(g.abs().sum()) > 0 for g in grads)
    # the grouping the learner pools is the sampled one
    assert torch.equal(train[Columns.ACTION_DIST_INPUTS][:, 20:30],
                       sampled[Columns.ACTION_DIST_INPUTS][:, 20:30])


def test_without_the_option_nothing_changes():
    module = make_module()
    with torch.no_grad():
        sampled = module.forward_exploration({Columns.OBS: observations()})
    assert GROUPING_PARTNER not in sampled
    inference = make_module(sampled_grouping=True).forward_inference({Columns.OBS: observations()})
    assert GROUPING_PARTNER not in inference  # inference parses deterministically


def test_the_entropy_bonus_grows_once_the_best_stops_improving():
    from policies.reinforce import REINFORCEConfig
    from policies.reinforce_core import ReinforceCore

    config = REINFORCEConfig().training(entropy_coeff=0.01, stall_patience=2, stall_entropy=0.2)
    core = ReinforceCore(config)  # what the RLlib learner and the in-process loops keep
    weights = []
    for best in (1.0, 2.0, 1.5, 2.0, 0.5, 3.0, 1.0):  # each update's batch best reward
        core._batch_best = best
        weights.append(core.begin_update())  # at the start of the next update
    # new bests at 1.0, 2.0 and 3.0; two updates without one (1.5, 2.0) reach the patience
    assert weights == [0.01, 0.01, 0.01, 0.2, 0.2, 0.01, 0.01]
    off = ReinforceCore(REINFORCEConfig().training(entropy_coeff=0.01))
    off._stalled_updates = 100
    assert off.entropy_weight(off.config) == 0.01
    with pytest.raises(ValueError, match="stall_patience"):
        REINFORCEConfig().training(stall_patience=-1)


def test_a_stalled_run_spreads_the_placement_distribution_again():
    from types import SimpleNamespace

    from policies.reinforce import REINFORCEConfig, REINFORCETorchLearner as L
    from policies.reinforce_core import ReinforceCore

    torch.manual_seed(0)
    module = make_module()
    obs = {Columns.OBS: observations()}
    with torch.no_grad():
        for p in module.net.placer[-1].parameters():
            p.mul_(20.0)  # a nearly deterministic placer
        before = module.forward_inference(obs)[Columns.ACTION_DIST_INPUTS][:, :20].reshape(2, 10, 2)
    core = ReinforceCore(REINFORCEConfig().training(stall_patience=2, stall_shrink=0.25))
    learner = SimpleNamespace(module={"default_policy": module})
    soften = lambda shrink: L.soften_modules(learner, shrink)  # noqa: E731 - the learner's
    core._stalled_updates = 1
    core.begin_update(soften)  # not stalled long enough: nothing changes
    with torch.no_grad():
        same = module.forward_inference(obs)[Columns.ACTION_DIST_INPUTS][:, :20].reshape(2, 10, 2)
    assert torch.equal(same, before)
    core._stalled_updates = 2
    core.begin_update(soften)
    assert core._stalled_updates == 0
    with torch.no_grad():
        after = module.forward_inference(obs)[Columns.ACTION_DIST_INPUTS][:, :20].reshape(2, 10, 2)
    gap_before, gap_after = before[..., 1] - before[..., 0], after[..., 1] - after[..., 0]
    assert torch.allclose(gap_after, 0.25 * gap_before, atol=1e-4)  # same order, a quarter of the spread


def test_a_real_run_gives_the_learner_each_steps_gate_edges(tmp_path, monkeypatch):
    """The gate edges the sampler keeps (extra model output) reach the learner's batch
    in a real RLlib run, one per node and step, so the learner skips scoring every edge."""
    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.training import train
    from policies.hsdag.module import GATE_PARTNER

    seen = []
    forward_train = HSDAGRLModule._forward_train

    def spy(self, batch, **kwargs):
        seen.append(batch.get(GATE_PARTNER))
        return forward_train(self, batch, **kwargs)

    monkeypatch.setattr(HSDAGRLModule, "_forward_train", spy)
    cfg = TrainConfig.of(model="tiny_cnn", budget=20, env_runners=0, wandb="disabled", out=str(tmp_path),
                      name="gates", seed=0, backend="simulator", devices=["CPU", "GPU_MODEL"])
    train(cfg, quiet=True)
    assert seen and all(g is not None for g in seen)
    gates = torch.as_tensor(seen[0])
    assert gates.dim() == 3 and gates.shape[1] == cfg.learning.episode_len  # [episodes, steps, nodes]
    assert bool((gates >= -1).all()) and bool((gates >= 0).any())
