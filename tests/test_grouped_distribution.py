"""Tests of the grouped placement distribution that the HSDAG policy samples from:
layout, sampling within groups, and log-probability, entropy and KL by hand.
"""
from __future__ import annotations

import pickle

import gymnasium as gym
import pytest
import torch

from policies.distributions import GroupedPlacementDistribution, pack_dist_inputs, representatives

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process

# ----------------------------------------------------------------------------------
# The grouped placement distribution
# ----------------------------------------------------------------------------------
D3 = GroupedPlacementDistribution.for_devices(3)
G0_LOGITS = torch.tensor([1.0, 2.0, 3.0])
G1_LOGITS = torch.tensor([0.0, 0.0, 5.0])
HAND_ASSIGNMENT = torch.tensor([0, 1, 0, 1, -1])  # groups {0, 2}, {1, 3}; node 4 padded


def hand_dist() -> GroupedPlacementDistribution:
    logits = torch.stack([G0_LOGITS, G1_LOGITS, G0_LOGITS, G1_LOGITS, torch.zeros(3)])
    return D3.from_logits(pack_dist_inputs(logits, HAND_ASSIGNMENT))


def test_distribution_layout_and_required_input_dim():
    space = gym.spaces.MultiDiscrete([3] * 5)
    assert D3.required_input_dim(space) == 5 * 4
    inputs = pack_dist_inputs(torch.zeros(5, 3), HAND_ASSIGNMENT)
    assert inputs.shape == (20,) and inputs[15:].tolist() == [0, 1, 0, 1, -1]
    with pytest.raises(ValueError, match="same D devices"):
        D3.required_input_dim(gym.spaces.MultiDiscrete([3, 2]))
    with pytest.raises(ValueError, match="number of devices"):
        GroupedPlacementDistribution.from_logits(inputs)
    with pytest.raises(ValueError, match=r"N_max \* \(D \+ 1\)"):
        GroupedPlacementDistribution.for_devices(4).from_logits(torch.zeros(7))
    assert pickle.loads(pickle.dumps(D3)) is D3
    rep, is_rep = representatives(HAND_ASSIGNMENT)
    assert rep.tolist() == [0, 1, 0, 1, 4] and is_rep.tolist() == [True, True, False, False, False]


def test_samples_are_constant_within_groups():
    torch.manual_seed(0)
    samples = hand_dist().sample(sample_shape=(2000,))
    assert samples.shape == (2000, 5)
    assert torch.equal(samples[:, 0], samples[:, 2]) and torch.equal(samples[:, 1], samples[:, 3])
    assert bool((samples[:, 4] == 0).all())
    freq = torch.bincount(samples[:, 0], minlength=3).float() / 2000
    assert torch.allclose(freq, torch.softmax(G0_LOGITS, 0), atol=0.04)


def test_logp_entropy_kl_by_hand():
    dist = hand_dist()
    lp0, lp1 = torch.log_softmax(G0_LOGITS, 0), torch.log_softmax(G1_LOGITS, 0)
    action = torch.tensor([2, 0, 2, 0, 0])
    assert torch.isclose(dist.logp(action), lp0[2] + lp1[0])
    # Not constant within a group: the representative (first node) decides.
    assert torch.isclose(dist.logp(torch.tensor([1, 2, 0, 1, 2])), lp0[1] + lp1[2])
    ent = -(lp0.exp() * lp0).sum() - (lp1.exp() * lp1).sum()
    assert torch.isclose(dist.entropy(), ent)

    other_logits = torch.tensor([[0.0] * 3, [1.0] * 3, [0.0] * 3, [1.0] * 3, [0.0] * 3])
    other = D3.from_logits(pack_dist_inputs(other_logits, HAND_ASSIGNMENT))
    q = torch.log_softmax(torch.zeros(3), 0)
    kl = (lp0.exp() * (lp0 - q)).sum() + (lp1.exp() * (lp1 - q)).sum()
    assert torch.isclose(dist.kl(other), kl)
    assert torch.isclose(dist.kl(dist), torch.tensor(0.0), atol=1e-6)

    for sample in hand_dist().sample(sample_shape=(50,)):
        assert torch.isclose(dist.logp(sample), lp0[sample[0]] + lp1[sample[1]])

    greedy = dist.to_deterministic()
    assert greedy.sample().tolist() == [2, 2, 2, 2, 0]
    assert greedy.logp(greedy.sample()).shape == ()
    with pytest.raises(NotImplementedError, match="sample\\(\\) with logp"):
        dist.rsample()


def test_batched_distribution_shapes():
    logits = torch.randn(4, 3, 6, 2)  # [B, T, N_max, D]
    assignment = torch.tensor([0, 0, 1, 1, 2, -1]).expand(4, 3, 6)
    dist = GroupedPlacementDistribution.for_devices(2).from_logits(pack_dist_inputs(logits, assignment))
    a = dist.sample()
    assert a.shape == (4, 3, 6)
    assert dist.logp(a).shape == (4, 3) and dist.entropy().shape == (4, 3)
    assert dist.num_groups.tolist() == [[3] * 3] * 4
