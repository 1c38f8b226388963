"""Segment moves (policies/hsdag/segment_moves.py): an exact distribution that reaches what node moves cannot."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns

from policies.distributions import pack_dist_inputs
from policies.hsdag.move_distribution import GroupedMoveDistribution, pack_move_inputs
from policies.hsdag.segment_moves import SEGMENT_SHARE, SegmentMoveDistribution, pack_segment_inputs
from tests.test_learning_speed import all_actions, sampled_module

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process


def segment_dist(logits, assignment, moves, starts) -> SegmentMoveDistribution:
    inputs = pack_segment_inputs(pack_move_inputs(pack_dist_inputs(logits, assignment), moves), starts)
    return SegmentMoveDistribution.for_devices(logits.shape[-1]).from_logits(inputs)


@pytest.mark.parametrize("devices,assignment", [(2, [0, 0, 1, 1, 1, -1]), (3, [0, 1, 0, 1, 1])])
def test_segment_distribution_is_a_distribution_and_samples_as_it_scores(devices, assignment):
    torch.manual_seed(0)
    n = len(assignment)
    dist = segment_dist(torch.randn(n, devices), torch.tensor(assignment), torch.randn(n) - 1.0,
                        torch.randn(n))
    valid = [i for i, g in enumerate(assignment) if g >= 0]
    actions = all_actions(n, valid, devices)
    p = dist.logp(actions).exp()
    assert p.sum().item() == pytest.approx(1.0, abs=1e-5)
    samples = dist.sample(sample_shape=(60000,))
    assert bool((samples[:, [i for i in range(n) if i not in valid]] == 0).all())
    freq = torch.stack([(samples == a).all(-1).float().mean() for a in actions])
    assert torch.allclose(freq, p, atol=0.01)
    assert dist.entropy().item() > 0
    assert dist.kl(dist).abs().item() < 1e-6


def test_a_segment_reaches_a_run_of_changes_that_single_moves_all_but_never_sample():
    """Sure groups (all on device 1) and rare moves: three neighbours on device 0
    together are a ~1e-26 event for node moves and a few-percent one with segments."""
    n = 8
    logits = torch.tensor([[-20.0, 20.0]]).expand(n, 2)
    assignment = torch.zeros(n, dtype=torch.long)
    moves = torch.full((n,), -20.0)
    target = torch.tensor([1, 1, 0, 0, 0, 1, 1, 1])
    plain = GroupedMoveDistribution.for_devices(2).from_logits(
        pack_move_inputs(pack_dist_inputs(logits, assignment), moves))
    assert plain.logp(target).item() < -55
    seg = segment_dist(logits, assignment, moves, torch.zeros(n))
    # start at node 2 (1 / (n + 1)), length 3 (1 / 7), device 0 (1 / 2): the only way
    expected = np.log(1 / (n + 1) / 7 / 2)
    assert seg.logp(target).item() == pytest.approx(expected, abs=1e-4)
    samples = seg.sample(sample_shape=(20000,))
    assert (samples == target).all(-1).float().mean().item() == pytest.approx(np.exp(expected), abs=0.003)


def test_module_with_segment_moves_keeps_logp_between_sampling_and_training():
    module, obs, sampled = sampled_module(node_moves=True, segment_moves=True)
    assert sampled.shape == (2, 8 * 5)
    dist_cls = module.get_train_action_dist_cls()
    dist = dist_cls.from_logits(sampled)
    # at the start a segment move is SEGMENT_SHARE likely
    _, none_logp = dist._start_logp()
    assert torch.allclose(none_logp.exp(), torch.full((2,), 1 - SEGMENT_SHARE), atol=1e-5)
    action = dist.sample()
    train = module.forward_train({Columns.OBS: obs, Columns.ACTION_DIST_INPUTS: sampled})
    logp = dist_cls.from_logits(train[Columns.ACTION_DIST_INPUTS]).logp(action)
    assert torch.allclose(logp, dist.logp(action), atol=1e-5)
    logp.sum().backward()
    assert module.segment_head.mlp[-1].weight.grad.abs().sum() > 0  # REINFORCE trains the starts


def test_run_with_segment_moves_learns_on_the_simulator(tmp_path):
    """A real RLlib run with segment moves: feasible, no slower than the best single device."""
    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.training import train

    cfg = TrainConfig.of(model="tiny_cnn", budget=60, env_runners=0, wandb="disabled",
                      out=str(tmp_path), name="seg", seed=0, backend="simulator",
                      segment_moves=True, checkpoint_every=100)
    s = train(cfg, quiet=True)
    b = s["baselines"]
    single = min(v for k, v in b.items() if k.endswith("_only"))
    assert s["placements"] >= 60
    assert s["method_best_latency_s"] <= single
    assert s["method_best_latency_s"] <= b["optimum"] * 1.2
