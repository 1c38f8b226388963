"""Tests of the HSDAG RLModule: padded observations, the stepwise and the learner's passes,
and learning checks: REINFORCE in plain torch and one PPO iteration through RLlib.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns

from policies.distributions import GroupedPlacementDistribution
from envs.observation import pad_graph_observation, placement_spaces, unpad_graphs
from policies.hsdag.module import HSDAGRLModule
from hsdag_cases import SIX_NODE_EDGES, make_module, two_padded_observations

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process

# ----------------------------------------------------------------------------------
# The RLModule
# ----------------------------------------------------------------------------------


def test_spaces_and_padding_helpers():
    obs_space, act_space = placement_spaces(10, 12, 3, 4)
    obs = pad_graph_observation(np.ones((6, 3)), SIX_NODE_EDGES, 10, 12)
    assert obs_space.contains(obs)
    assert act_space.nvec.tolist() == [4] * 10
    with pytest.raises(ValueError, match="raise max_nodes"):
        pad_graph_observation(np.ones((11, 3)), [[0], [1]], 10, 12)
    bad = two_padded_observations()
    bad["node_mask"][0, 5] = 0.0  # node 5 of graph 0 still has edges
    with pytest.raises(ValueError, match="touches a padded node"):
        unpad_graphs(bad["x"], bad["edge_index"], bad["node_mask"], bad["edge_mask"])
    with pytest.raises(ValueError, match="observation space"):
        HSDAGRLModule(observation_space=act_space, action_space=act_space, model_config={})


def test_module_forward_passes_on_two_padded_observations():
    torch.manual_seed(0)
    module = make_module(devices=3)
    obs = two_padded_observations()
    width = GroupedPlacementDistribution.required_input_dim(module.action_space)
    assert width == 10 * 4

    for forward in (module.forward_inference, module.forward_exploration, module.forward_train):
        out = forward({Columns.OBS: obs})
        assert out[Columns.ACTION_DIST_INPUTS].shape == (2, width)
        assert out[Columns.STATE_OUT]["node_state"].shape == (2, 10, 16)
    assert out[Columns.EMBEDDINGS].shape == (2, 16)
    assert module.compute_values({Columns.OBS: obs}).shape == (2,)

    dist = module.get_exploration_action_dist_cls().from_logits(out[Columns.ACTION_DIST_INPUTS])
    action = dist.sample()
    assert action.shape == (2, 10)
    assert dist.assignment[0, 6:].tolist() == [-1] * 4 and dist.assignment[1, 8:].tolist() == [-1] * 2
    assert action[0, 6:].tolist() == [0] * 4 and action[1, 8:].tolist() == [0] * 2
    assert bool((dist.num_groups >= 2).all())
    inference_cls = module.get_inference_action_dist_cls()
    greedy = inference_cls.from_logits(out[Columns.ACTION_DIST_INPUTS]).to_deterministic()
    assert greedy.sample().shape == (2, 10)
    # Padded node states stay zero.
    assert bool((out[Columns.STATE_OUT]["node_state"][0, 6:] == 0).all())


def test_all_padded_observation_is_harmless():
    """RLlib zero-pads sequences for stateful modules: empty graphs must not break anything."""
    torch.manual_seed(0)
    module = make_module()
    obs = two_padded_observations()
    for key in ("node_mask", "edge_mask", "x"):
        obs[key][1] = 0.0
    zero_inputs = torch.zeros(2, 30)  # what zero-padding stores as the sampled inputs
    out = module.forward_train({Columns.OBS: obs, Columns.ACTION_DIST_INPUTS: zero_inputs})
    dist_inputs = out[Columns.ACTION_DIST_INPUTS]
    assert dist_inputs[1, 20:].tolist() == [-1.0] * 10
    dist = module.get_train_action_dist_cls().from_logits(zero_inputs)
    loss = dist.logp(torch.zeros(2, 10, dtype=torch.long)).sum() + module.compute_values(
        {Columns.OBS: obs}, embeddings=out[Columns.EMBEDDINGS]
    ).sum()
    loss = loss + module.get_train_action_dist_cls().from_logits(dist_inputs).entropy().sum()
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in module.parameters() if p.grad is not None)


def test_stepwise_state_matches_the_learners_sequence_pass():
    torch.manual_seed(0)
    module = make_module()
    obs = two_padded_observations()
    state = {"node_state": torch.as_tensor(module.get_initial_state()["node_state"]).expand(2, -1, -1)}
    steps = []
    with torch.no_grad():
        for _ in range(3):  # what the EnvRunner does: one step at a time, state carried
            out = module.forward_exploration({Columns.OBS: obs, Columns.STATE_IN: state})
            steps.append(out[Columns.ACTION_DIST_INPUTS])
            state = out[Columns.STATE_OUT]
        # What the learner does: a [B, T] sequence from the initial state, with the
        # distribution inputs stored at sampling time (they carry the sampled,
        # noise-perturbed groupings).
        seq_obs = {k: v.unsqueeze(1).expand(-1, 3, *v.shape[1:]) for k, v in obs.items()}
        stored = torch.stack(steps, 1)
        seq = module.forward_train({Columns.OBS: seq_obs, Columns.ACTION_DIST_INPUTS: stored})
        # Without noise (inference) the learner's own parsing gives the same groups.
        inference, state = [], {"node_state": torch.zeros(2, 10, 16)}
        for _ in range(3):
            out = module.forward_inference({Columns.OBS: obs, Columns.STATE_IN: state})
            inference.append(out[Columns.ACTION_DIST_INPUTS])
            state = out[Columns.STATE_OUT]
        reparsed = module.forward_train({Columns.OBS: seq_obs})
    assert seq[Columns.ACTION_DIST_INPUTS].shape == (2, 3, 30)
    assert torch.allclose(seq[Columns.ACTION_DIST_INPUTS], stored, atol=1e-5)
    assert torch.allclose(reparsed[Columns.ACTION_DIST_INPUTS], torch.stack(inference, 1), atol=1e-5)
    assert not torch.allclose(steps[0], steps[1])  # the node-state update matters

    stateless = make_module(node_state_update=False)
    assert stateless.get_initial_state() == {} and not stateless.is_stateful()
    out = stateless.forward_exploration({Columns.OBS: obs})
    assert Columns.STATE_OUT not in out


def test_an_episode_shares_one_structural_embedding_with_the_same_gradients():
    """The learner's [B, T] pass embeds the graphs once when every step sees the same
    graphs; values and gradients equal those of embedding them at every step."""
    torch.manual_seed(0)
    module = make_module()
    obs = two_padded_observations()
    seq_obs = {k: v.unsqueeze(1).expand(-1, 4, *v.shape[1:]) for k, v in obs.items()}
    calls = []
    module.net.embed = (lambda f: lambda *a, **k: calls.append(1) or f(*a, **k))(module.net.embed)
    shared = module.forward_train({Columns.OBS: seq_obs})[Columns.ACTION_DIST_INPUTS]
    assert len(calls) == 1
    shared.square().sum().backward()
    grads = {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}
    module.zero_grad()
    state, per_step = torch.zeros(2, 10, 16), []
    for t in range(4):  # the same episode, embedding at every step
        out = module._step({k: v[:, t] for k, v in seq_obs.items()}, state, None)
        per_step.append(out.dist_inputs)
        state = out.next_state
    assert len(calls) == 5
    torch.stack(per_step, 1).square().sum().backward()
    assert torch.allclose(torch.stack(per_step, 1), shared, atol=1e-6)
    for n, p in module.named_parameters():
        if n in grads:
            assert torch.allclose(p.grad, grads[n], atol=1e-5), n


def test_learner_logp_equals_sampler_logp_under_the_sampled_grouping():
    torch.manual_seed(0)
    module = make_module(devices=3)
    obs = two_padded_observations()
    with torch.no_grad():
        sampled = module.forward_exploration({Columns.OBS: obs})
    dist_cls = module.get_exploration_action_dist_cls()
    stored = sampled[Columns.ACTION_DIST_INPUTS].numpy()  # what the episode keeps
    dist = dist_cls.from_logits(torch.as_tensor(stored))
    action = dist.sample()
    logp_sampler = dist.logp(action)

    learner_dist = module.get_train_action_dist_cls().from_logits(torch.as_tensor(stored))
    assert torch.allclose(learner_dist.logp(action), logp_sampler)

    train = module.forward_train({Columns.OBS: obs, Columns.ACTION_DIST_INPUTS: torch.as_tensor(stored)})
    logp_learner = dist_cls.from_logits(train[Columns.ACTION_DIST_INPUTS]).logp(action)
    assert torch.allclose(logp_learner, logp_sampler, atol=1e-6)

    # After the parameters move, forward_train keeps the sampled grouping.
    with torch.no_grad():
        for p in module.net.pool.score_mlp.parameters():
            p.add_(torch.randn_like(p))
    moved = module.forward_train({Columns.OBS: obs, Columns.ACTION_DIST_INPUTS: torch.as_tensor(stored)})
    assert torch.equal(moved[Columns.ACTION_DIST_INPUTS][:, 30:], torch.as_tensor(stored)[:, 30:])


def test_reinforce_learns_to_prefer_the_rewarded_device():
    """Reward = fraction of nodes on device 1; plain REINFORCE in torch raises it."""
    torch.manual_seed(0)
    module = make_module(max_nodes=8, max_edges=8, devices=2)
    rng = np.random.default_rng(0)
    single = pad_graph_observation(rng.normal(size=(6, 3)), SIX_NODE_EDGES, 8, 8)
    obs = {k: torch.as_tensor(np.repeat(v[None], 16, 0)) for k, v in single.items()}
    valid = obs["node_mask"] > 0.5
    dist_cls = module.get_train_action_dist_cls()
    optim = torch.optim.Adam(module.parameters(), lr=1e-2)

    def expected_reward(dist) -> float:
        p1 = torch.softmax(dist.logits.detach(), -1)[..., 1]
        return float(p1[valid].mean())

    history = []
    for _ in range(60):
        dist = dist_cls.from_logits(module.forward_train({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS])
        action = dist.sample()
        reward = ((action == 1) & valid).float().sum(-1) / valid.sum(-1)
        loss = -((reward - reward.mean()) * dist.logp(action)).mean()
        optim.zero_grad()
        loss.backward()
        optim.step()
        history.append(expected_reward(dist))
    assert history[-1] > history[0] and history[-1] > 0.95, history[::10]


class TinyPlacementEnv(gym.Env):
    """Places the 6-node DAG on 2 devices; reward = fraction of nodes on device 1."""

    def __init__(self, config=None):
        config = config or {}
        self.episode_len = config.get("episode_len", 4)
        self.observation_space, self.action_space = placement_spaces(8, 8, 3, 2)
        rng = np.random.default_rng(0)
        self._obs = pad_graph_observation(rng.normal(size=(6, 3)), SIX_NODE_EDGES, 8, 8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._obs, {}

    def step(self, action):
        self._t += 1
        reward = float(np.mean(np.asarray(action)[:6] == 1))
        return self._obs, reward, False, self._t >= self.episode_len, {}


def test_one_ppo_iteration_through_rllib():
    ray = pytest.importorskip("ray")
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    config = (
        PPOConfig()
        .environment(TinyPlacementEnv)
        .env_runners(num_env_runners=0)
        .training(train_batch_size_per_learner=32, minibatch_size=16, num_epochs=1)
        .rl_module(
            rl_module_spec=RLModuleSpec(
                module_class=HSDAGRLModule, model_config={"hidden_dim": 16, "max_seq_len": 4}
            )
        )
    )
    algo = config.build_algo()
    try:
        result = algo.train()
        learner = result["learners"]["default_policy"]
        assert np.isfinite(learner["policy_loss"]) and np.isfinite(learner["vf_loss"])
        assert learner["entropy"] > 0
        assert 0.0 <= result["env_runners"]["episode_return_mean"] <= 4.0
    finally:
        algo.stop()
        ray.shutdown()


@pytest.mark.parametrize("config", [{}, {"self_loops": True, "node_moves": True}])
def test_the_learner_scores_only_the_sampled_gate_edges_with_the_same_values_and_gradients(config):
    from policies.hsdag.module import GATE_PARTNER

    torch.manual_seed(0)
    module = make_module(devices=3, **config)
    obs = two_padded_observations()
    with torch.no_grad():
        sampled = module.forward_exploration({Columns.OBS: obs})
    stored = sampled[Columns.ACTION_DIST_INPUTS]
    gates = sampled[GATE_PARTNER]
    valid = obs["node_mask"] > 0.5
    assert gates.shape == valid.shape and bool((gates[~valid] == -1).all())
    assert bool((gates[valid] >= 0).all())  # every node of these graphs has an edge

    calls = []
    score_all = module.net.pool._score_all
    module.net.pool._score_all = lambda *a: calls.append(1) or score_all(*a)

    def train_pass(batch):
        module.zero_grad()
        out = module.forward_train(batch)[Columns.ACTION_DIST_INPUTS]
        (out[:, :30] * torch.linspace(-1, 1, 30)).sum().backward()
        return out.detach(), {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}

    calls.clear()
    parsed, parsed_grads = train_pass({Columns.OBS: obs, Columns.ACTION_DIST_INPUTS: stored})
    assert calls  # without the gates the learner scores every edge to find them
    calls.clear()
    gated, gated_grads = train_pass({Columns.OBS: obs, Columns.ACTION_DIST_INPUTS: stored, GATE_PARTNER: gates})
    assert not calls
    assert torch.allclose(gated, parsed, atol=1e-6)
    assert torch.allclose(gated, stored, atol=1e-6)  # and the sampler's own inputs
    assert gated_grads.keys() == parsed_grads.keys()
    assert "net.pool.score_mlp.0.weight" in gated_grads  # the scorer still learns through the gates
    for n, grad in parsed_grads.items():
        assert torch.allclose(gated_grads[n], grad, atol=1e-5), n

    # gates that do not fit the graphs are ignored (the learner finds them again)
    calls.clear()
    bad, _ = train_pass({Columns.OBS: obs, Columns.ACTION_DIST_INPUTS: stored,
                         GATE_PARTNER: torch.full_like(gates, 10_000.0)})
    assert calls and torch.allclose(bad, parsed, atol=1e-6)
