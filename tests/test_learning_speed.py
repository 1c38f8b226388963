"""The learning-speed mechanisms of HSDAG: node moves, a start around the best
single device, and replay of measured episodes in REINFORCE updates."""
from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from envs.observation import pad_graph_observation, placement_spaces
from policies.distributions import pack_dist_inputs
from policies.hsdag.policy import HSDAGConfig, HSDAGNet
from policies.hsdag.module import HSDAGRLModule
from policies.hsdag.move_distribution import GroupedMoveDistribution, pack_move_inputs
from policies.reinforce import REINFORCE, REINFORCEConfig

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process

SIX_NODE_EDGES = np.array([[0, 0, 1, 2, 3, 4], [1, 2, 3, 3, 4, 5]])


def all_actions(num_nodes: int, valid: list[int], devices: int) -> torch.Tensor:
    rows = []
    for combo in itertools.product(range(devices), repeat=len(valid)):
        a = torch.zeros(num_nodes, dtype=torch.long)
        a[valid] = torch.tensor(combo)
        rows.append(a)
    return torch.stack(rows)


@pytest.mark.parametrize("devices,assignment", [(2, [0, 0, 1, 1, 1, -1]), (3, [0, 1, 0, 1, 1])])
def test_move_distribution_is_a_distribution_and_samples_as_it_scores(devices, assignment):
    torch.manual_seed(0)
    n = len(assignment)
    logits = torch.randn(n, devices)
    moves = torch.randn(n) - 1.0
    dist = GroupedMoveDistribution.for_devices(devices).from_logits(
        pack_move_inputs(pack_dist_inputs(logits, torch.tensor(assignment)), moves))
    valid = [i for i, g in enumerate(assignment) if g >= 0]
    actions = all_actions(n, valid, devices)
    p = dist.logp(actions).exp()
    assert p.sum().item() == pytest.approx(1.0, abs=1e-5)
    # every placement can be sampled, including a node alone on its device
    assert bool((p > 0).all())
    samples = dist.sample(sample_shape=(40000,))
    assert bool((samples[:, [i for i in range(n) if i not in valid]] == 0).all())
    freq = torch.stack([(samples == a).all(-1).float().mean() for a in actions])
    assert torch.allclose(freq, p, atol=0.01)
    assert dist.entropy().item() > 0


def test_move_distribution_without_moves_is_the_grouped_one():
    logits = torch.tensor([[2.0, 0.0], [2.0, 0.0], [-1.0, 1.0], [-1.0, 1.0]])
    assignment = torch.tensor([0, 0, 1, 1])
    dist = GroupedMoveDistribution.for_devices(2).from_logits(
        pack_move_inputs(pack_dist_inputs(logits, assignment), torch.full((4,), -30.0)))
    split = torch.tensor([0, 0, 1, 1])
    expected = torch.log_softmax(logits[0], -1)[0] + torch.log_softmax(logits[2], -1)[1]
    assert dist.logp(split).item() == pytest.approx(expected.item(), abs=1e-5)
    assert dist.logp(torch.tensor([0, 1, 1, 1])).item() < -25  # a move is all but impossible
    assert dist.to_deterministic().loc.tolist() == [0, 0, 1, 1]


def test_node_moves_start_at_about_one_moving_node_per_placement():
    torch.manual_seed(0)
    x = torch.randn(6, 3)
    edges = torch.as_tensor(SIX_NODE_EDGES)
    net = HSDAGNet(3, 2, HSDAGConfig(hidden_dim=16, node_moves=True))
    out = net(x, edges)
    assert out.move_logits.shape == (6,)
    expected_moves = torch.sigmoid(out.move_logits).sum().item()
    assert expected_moves == pytest.approx(1.0, rel=1e-4)  # logit(1 / n) per node
    assert HSDAGNet(3, 2, HSDAGConfig(hidden_dim=16))(x, edges).move_logits is None


def test_start_device_head_start_is_added_to_every_group():
    x = torch.randn(6, 3)
    edges = torch.as_tensor(SIX_NODE_EDGES)
    torch.manual_seed(1)
    plain = HSDAGNet(3, 2, HSDAGConfig(hidden_dim=16))(x, edges)
    torch.manual_seed(1)
    started = HSDAGNet(3, 2, HSDAGConfig(hidden_dim=16, prior_device=1, prior_logit=2.5))(x, edges)
    assert torch.equal(plain.grouping.assignment, started.grouping.assignment)
    assert torch.allclose(started.group_logits - plain.group_logits,
                          torch.tensor([0.0, 2.5]).expand_as(plain.group_logits))


def sampled_module(**model_config):
    """An HSDAG module (hidden 16, plus ``model_config``), a batch of the six-node
    graph twice (padded to 8 nodes, 2 devices) and its sampled distribution inputs."""
    torch.manual_seed(0)
    obs_space, act_space = placement_spaces(8, 8, 3, 2)
    module = HSDAGRLModule(observation_space=obs_space, action_space=act_space,
                           model_config={"hidden_dim": 16, **model_config})
    rng = np.random.default_rng(0)
    single = pad_graph_observation(rng.normal(size=(6, 3)), SIX_NODE_EDGES, 8, 8)
    obs = {k: torch.as_tensor(np.repeat(v[None], 2, 0)) for k, v in single.items()}
    with torch.no_grad():
        sampled = module.forward_exploration({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
    return module, obs, sampled


def test_module_with_node_moves_keeps_the_sampled_grouping_and_logp():
    module, obs, sampled = sampled_module(node_moves=True)
    assert sampled.shape == (2, 8 * 4)
    dist_cls = module.get_train_action_dist_cls()
    action = dist_cls.from_logits(sampled).sample()
    train = module.forward_train({Columns.OBS: obs, Columns.ACTION_DIST_INPUTS: sampled})
    logp = dist_cls.from_logits(train[Columns.ACTION_DIST_INPUTS]).logp(action)
    assert torch.allclose(logp, dist_cls.from_logits(sampled).logp(action), atol=1e-5)


def test_floored_logits_are_the_exact_mixture_and_stay_finite():
    from policies.hsdag.move_distribution import floored_logits

    m = torch.tensor([-80.0, -3.0, 0.0, 3.0, 80.0], requires_grad=True)
    q = torch.sigmoid(floored_logits(m, 0.05))
    expected = 0.95 * torch.sigmoid(m) + 0.05
    assert torch.allclose(q, expected, atol=1e-6)
    q.sum().backward()
    assert torch.isfinite(m.grad).all()


@pytest.mark.parametrize("floor", [0.0, 1.0])
def test_move_floor_bounds_every_nodes_move_probability(floor):
    from policies.hsdag.move_distribution import split_move_inputs

    module, obs, _ = sampled_module(node_moves=True, move_floor=floor)
    with torch.no_grad():  # a policy that has all but stopped moving nodes
        module.net.mover[-1].bias.fill_(-50.0)
        sampled = module.forward_exploration({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
    _, move_logits = split_move_inputs(sampled, 2)
    q = torch.sigmoid(move_logits[:, :6])  # the six real nodes
    if floor:
        assert torch.all(q >= floor / 6 - 1e-6) and torch.all(q < floor / 6 + 1e-3)
    else:
        assert torch.all(q < 1e-9)
    # the learner's pass gives the sampler's log-probability, floor included
    dist_cls = module.get_train_action_dist_cls()
    action = dist_cls.from_logits(sampled).sample()
    train = module.forward_train({Columns.OBS: obs, Columns.ACTION_DIST_INPUTS: sampled})
    logp = dist_cls.from_logits(train[Columns.ACTION_DIST_INPUTS]).logp(action)
    assert torch.allclose(logp, dist_cls.from_logits(sampled).logp(action), atol=1e-5)


def episode(rewards: list[float]) -> SingleAgentEpisode:
    ep = SingleAgentEpisode(observations=[0] * (len(rewards) + 1), actions=[0] * len(rewards),
                            rewards=rewards, len_lookback_buffer=0)
    return ep


@pytest.mark.parametrize("kind,kept", [("elite", [5.0, 3.0]), ("recent", [2.0, 0.2])])
def test_replay_memory_keeps_the_best_or_the_newest_episodes(kind, kept):
    algo = SimpleNamespace(config=REINFORCEConfig().training(replay_episodes=2, replay=kind))
    memory = REINFORCE._replay_memory(algo)
    assert memory == []
    for rewards in ([1.0, 3.0], [5.0, 0.5], [0.1, 0.2], [2.0, 1.0]):
        REINFORCE._remember(algo, REINFORCE._replay_memory(algo), [episode(rewards)])
    assert [max(e.get_rewards()) for e in REINFORCE._replay_memory(algo)] == kept
    off = SimpleNamespace(config=REINFORCEConfig())
    REINFORCE._remember(off, REINFORCE._replay_memory(off), [episode([1.0])])
    assert REINFORCE._replay_memory(off) == []


def test_replay_settings_are_checked():
    with pytest.raises(ValueError):
        REINFORCEConfig().training(replay="best")
    with pytest.raises(ValueError):
        REINFORCEConfig().training(replay_episodes=-1)


def test_run_with_every_mechanism_learns_on_the_simulator(tmp_path):
    """node moves + start around the best single device + elite replay + two epochs:
    a real RLlib run whose best is feasible and no slower than the best single
    device it starts around, and which keeps exploring (distinct placements)."""
    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.training import train

    cfg = TrainConfig.of(model="resnet50", budget=60, env_runners=0, wandb="disabled",
                      out=str(tmp_path), name="fast", seed=0, backend="simulator",
                      devices=["CPU", "GPU_SMALLMEM"], node_moves=True, start="best_single",
                      replay_episodes=2, num_epochs=2, checkpoint_every=100)
    s = train(cfg, quiet=True)
    b = s["baselines"]
    single = min(v for k, v in b.items() if k.endswith("_only"))
    assert s["placements"] >= 60
    assert b["optimum"] <= s["method_best_latency_s"] * (1 + 1e-9)
    assert s["method_best_latency_s"] <= single
    assert s["measurements"] >= 20  # distinct placements of the 60: no collapse


def test_elite_advantages_train_on_the_best_quarter_only():
    from policies.reinforce import advantages

    rewards = torch.tensor([[1.0, 5.0, 3.0, 3.0], [0.5, 4.0, 2.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])  # 9.0 is padding
    a = advantages(rewards, mask, "elite")
    # 7 valid rewards: the best 2 (5.0 and 4.0) get 1, the rest and the padding 0
    assert a.tolist() == [[0.0, 1.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]
