"""HSDAG sampling around the run's best placement so far (``--incumbent-prior``)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns

from envs.observation import pad_graph_observation, placement_spaces
from policies.hsdag.policy import HSDAGConfig, HSDAGNet, incumbent_majority
from policies.hsdag.module import HSDAGRLModule

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process

SIX_NODE_EDGES = np.array([[0, 0, 1, 2, 3, 4], [1, 2, 3, 3, 4, 5]])


def features(incumbent: list[int]) -> torch.Tensor:
    """Three random features per node of the six-node graph, then the incumbent's
    one-hot device over two devices (``-1``: none)."""
    rng = np.random.default_rng(3)
    inc = np.zeros((6, 2), np.float32)
    for v, d in enumerate(incumbent):
        if d >= 0:
            inc[v, d] = 1.0
    return torch.as_tensor(np.concatenate([rng.normal(size=(6, 3)).astype(np.float32), inc], 1))


def test_incumbent_majority_is_each_groups_most_common_device():
    inc = torch.tensor([[1., 0.], [1., 0.], [0., 1.], [0., 1.], [0., 1.], [0., 0.]])
    got = incumbent_majority(inc, torch.tensor([0, 0, 0, 1, 1, 2]), 3)
    assert got.tolist() == [[1., 0.], [0., 1.], [0., 0.]]


def net_pair(prior: float):
    torch.manual_seed(7)
    plain = HSDAGNet(5, 2, HSDAGConfig(hidden_dim=16, node_moves=True))
    torch.manual_seed(7)
    led = HSDAGNet(5, 2, HSDAGConfig(hidden_dim=16, node_moves=True, incumbent_prior=prior))
    return plain, led


def test_prior_leans_groups_to_their_majority_and_moves_nodes_apart_from_it_back():
    plain, led = net_pair(1.5)
    incumbent = [0, 0, 0, 1, 0, 0]  # one node apart from the rest
    x, edges = features(incumbent), torch.as_tensor(SIX_NODE_EDGES)
    a, b = plain(x, edges), led(x, edges)
    assert torch.equal(a.grouping.assignment, b.grouping.assignment)
    majority = incumbent_majority(x[:, -2:], a.grouping.assignment, a.grouping.num_groups)
    assert torch.allclose(b.group_logits - a.group_logits, 1.5 * majority)
    own = torch.tensor(incumbent)
    apart = (majority.argmax(-1)[a.grouping.assignment] != own).float()
    assert apart.sum() >= 1  # node 3 sits in a group whose majority is device 0 (no singletons)
    assert torch.allclose(b.move_logits - a.move_logits, apart * (1.5 + math.log(5)), atol=1e-5)
    # no incumbent yet (zero columns): the plain policy's logits
    x0 = features([-1] * 6)
    c, d = plain(x0, edges), led(x0, edges)
    assert torch.equal(c.group_logits, d.group_logits) and torch.equal(c.move_logits, d.move_logits)


def module_and_obs(prior: float, incumbent: list[int]):
    torch.manual_seed(0)
    obs_space, act_space = placement_spaces(8, 8, 5, 2)
    module = HSDAGRLModule(observation_space=obs_space, action_space=act_space,
                           model_config={"hidden_dim": 16, "node_moves": True,
                                         "incumbent_prior": prior})
    single = pad_graph_observation(features(incumbent).numpy(), SIX_NODE_EDGES, 8, 8)
    obs = {k: torch.as_tensor(np.repeat(v[None], 400, 0)) for k, v in single.items()}
    return module, obs


def test_proposals_are_the_incumbent_with_few_changes_and_logp_is_the_samplers():
    incumbent = [1, 1, 0, 1, 1, 1]  # the fastest device but one node, as on mobile CNNs
    share = {}
    for prior in (0.0, 3.0):
        module, obs = module_and_obs(prior, incumbent)
        torch.manual_seed(1)
        with torch.no_grad():
            sampled = module.forward_exploration({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
        dist_cls = module.get_train_action_dist_cls()
        actions = dist_cls.from_logits(sampled).sample()[:, :6]
        share[prior] = (actions == torch.tensor(incumbent)).all(-1).float().mean().item()
        if prior:  # the learner's pass (stored grouping, same observation) scores what was sampled
            train = module.forward_train({Columns.OBS: obs, Columns.ACTION_DIST_INPUTS: sampled})
            full = torch.nn.functional.pad(actions, (0, 2))
            logp = dist_cls.from_logits(train[Columns.ACTION_DIST_INPUTS]).logp(full)
            assert torch.allclose(logp, dist_cls.from_logits(sampled).logp(full), atol=1e-5)
    # about 0.95 per group kept and a moving node per placement: ~0.3 of the proposals
    # are the incumbent itself, against 1 in 2^6 (~0.02) for an untrained uniform policy
    assert share[3.0] > 0.2 and share[3.0] > 5 * share[0.0]


def test_incumbent_prior_turns_on_the_incumbent_features_and_is_checked():
    from hsdag_ray.cli import UsageError
    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.resolve import env_config

    with pytest.raises(UsageError, match="incumbent_prior must be -1"):
        TrainConfig.of(incumbent_prior=-0.5).validate()
    with pytest.raises(ValueError, match="incumbent_prior must be -1 .the run decides. or >= 0"):
        HSDAGConfig(incumbent_prior=-0.5)
    for prior, on in ((0.0, False), (1.0, True)):
        cfg = TrainConfig.of(backend="simulator", devices=["CPU", "GPU_SMALLMEM"], incumbent_prior=prior)
        assert env_config(cfg, "simulator", cfg.env.devices, None, "")["incumbent"] is on


def test_the_prior_is_hsdags_with_the_guide_and_only_hsdags():
    """On for HSDAG with --guide, off as published; the other methods ignore it (their
    observation stays as it was); pre-training and a checkpoint made without it keep it off."""

    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.pretraining import PRETRAIN_DEFAULTS
    from hsdag_ray.run.pretrained import adopt_settings
    from hsdag_ray.run.resolve import env_config
    from policies.registry import get

    def features_on(cfg):
        return env_config(cfg, "simulator", ["CPU", "GPU_SMALLMEM"], None, "")["incumbent"]

    from hsdag_ray.run.resolve import resolved

    assert not features_on(TrainConfig()) and resolved(TrainConfig()).hsdag.incumbent_prior == 0.0
    guided = resolved(TrainConfig.of(guide=True))
    assert guided.hsdag.incumbent_prior == 2.0 and features_on(guided)
    assert get("hsdag").model_config(guided)["incumbent_prior"] == 2.0
    for method in ("placeto", "gdp", "rnn"):
        assert not features_on(TrainConfig.of(method=method, guide=True))
        assert features_on(TrainConfig.of(method=method, incumbent=True))  # asked for by name
    assert PRETRAIN_DEFAULTS["incumbent_prior"] == 0.0
    old = {"settings": {"hidden_dim": 64}, "reward": "speedup"}  # a checkpoint from before
    tuned = adopt_settings(TrainConfig.of(init="ckpt", guide=True), old)
    assert tuned.hsdag.incumbent_prior == 0.0 and not features_on(tuned)
    named = adopt_settings(TrainConfig.of(init="ckpt", incumbent_prior=3.0), old)
    assert named.hsdag.incumbent_prior == 3.0  # a setting the run names is kept (and checked on load)
    new = {"settings": {"incumbent_prior": 2.0, "incumbent": False}}
    assert adopt_settings(TrainConfig.of(init="ckpt"), new).hsdag.incumbent_prior == 2.0


def test_incumbent_flips_keeps_about_that_many_group_changes_on_a_large_graph():
    """With ``incumbent_flips`` F a group leans by max(prior, log((D-1) G / F)): on a graph
    of many groups an untrained policy changes about F of them per proposal, where the
    fixed lean changes a share of them (about G / (1 + e^2)); small graphs keep the
    fixed lean."""
    n = 600
    rng = np.random.default_rng(0)
    src = np.r_[np.arange(n - 1), np.arange(n - 3)]
    edges = torch.as_tensor(np.stack([src, np.r_[np.arange(1, n), np.arange(3, n)]]))
    inc = np.zeros((n, 2), np.float32)
    inc[:, 1] = 1.0  # the incumbent: everything on device 1
    x = torch.as_tensor(np.concatenate([rng.normal(size=(n, 3)).astype(np.float32), inc], 1))
    flips = {}
    for f in (0.0, 1.0):
        torch.manual_seed(7)
        net = HSDAGNet(5, 2, HSDAGConfig(hidden_dim=16, node_moves=True, incumbent_prior=2.0,
                                         incumbent_flips=f))
        with torch.no_grad():
            out = net(x, edges)
        g = out.grouping.num_groups
        lean = net.incumbent_lean(out.grouping.group_batch, 1, out.group_logits)
        assert torch.allclose(lean, torch.full((g,), max(2.0, math.log(g)) if f else 2.0))
        flips[f] = (1 - torch.softmax(out.group_logits, -1)[:, 1]).sum().item()  # expected changes
    assert g > 50 and flips[0.0] > 6 and 0.3 < flips[1.0] < 3
    # a six-node graph: log((D-1) G / F) is below the prior, which stays
    torch.manual_seed(7)
    net = HSDAGNet(5, 2, HSDAGConfig(hidden_dim=16, node_moves=True, incumbent_prior=2.0, incumbent_flips=1.0))
    out = net(features([1] * 6), torch.as_tensor(SIX_NODE_EDGES))
    assert torch.allclose(net.incumbent_lean(out.grouping.group_batch, 1, out.group_logits),
                          torch.full((out.grouping.num_groups,), 2.0))
