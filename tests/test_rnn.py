"""The RNN placer: its network and module, its baseline, and the sign of its learning."""
import math

import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns

from envs.observation import pad_graph_observation, placement_spaces
from envs.placement_env import reward_of
from policies.rnn.policy import neighbour_means
from policies.rnn.learner import EMABaseline
from policies.rnn.module import RNNPlacerRLModule

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process

N, E, F, D = 12, 20, 5, 3
ITERATIONS = 5


def module(grouper: bool = False, groups: int = 4, seed: int = 0) -> RNNPlacerRLModule:
    torch.manual_seed(seed)
    obs_space, act_space = placement_spaces(N, E, F, D)
    return RNNPlacerRLModule(observation_space=obs_space, action_space=act_space,
                             model_config={"hidden_dim": 16, "grouper": grouper, "num_groups": groups})


def chain_batch(sizes=(7, 12), seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    obs = []
    for n in sizes:
        src = np.arange(n - 1)
        obs.append(pad_graph_observation(rng.normal(size=(n, F)), np.stack([src, src + 1]), N, E))
    return {Columns.OBS: {k: torch.as_tensor(np.stack([o[k] for o in obs])) for k in obs[0]}}


def test_ema_baseline():
    b = EMABaseline(decay=0.5)
    # the first update is scored against its own mean, then folded in reward by reward
    assert np.allclose(b.advantages(np.array([1.0, 3.0])), [-1.0, 1.0])
    assert b.value == pytest.approx(0.5 * (0.5 * 2.0 + 0.5 * 1.0) + 0.5 * 3.0)  # 2.25
    # later updates are scored against the average before them
    assert np.allclose(b.advantages(np.array([4.0])), [4.0 - 2.25])
    assert b.value == pytest.approx(0.5 * 2.25 + 0.5 * 4.0)
    restored = EMABaseline()
    restored.load_state_dict(b.state_dict())
    assert restored.value == b.value and restored.decay == 0.5
    with pytest.raises(ValueError):
        EMABaseline(decay=1.0)


def test_neg_sqrt_reward_ranks_faster_placements_higher():
    assert reward_of(0.04, "neg_sqrt", 1.0) == pytest.approx(-0.2)
    assert reward_of(0.01, "neg_sqrt", 1.0) > reward_of(0.04, "neg_sqrt", 1.0)


def test_neighbour_means_follow_the_edges():
    x = torch.arange(4, dtype=torch.float32).reshape(1, 4, 1)  # node i has feature i
    edges = torch.tensor([[[0, 1, 0, 9], [2, 2, 3, 9]]])  # 0->2, 1->2, 0->3 and a padded edge
    ins, outs = neighbour_means(x, edges.clamp_max(3), torch.tensor([[1.0, 1.0, 1.0, 0.0]]))
    assert ins[0, :, 0].tolist() == [0.0, 0.0, 0.5, 0.0]
    assert outs[0, :, 0].tolist() == [2.5, 2.0, 0.0, 0.0]


@pytest.mark.parametrize("grouper", [False, True])
def test_sampled_logp_is_what_the_learner_recomputes(grouper):
    m = module(grouper)
    batch = chain_batch()
    out = m.forward_exploration(batch)
    actions = out[Columns.ACTIONS]
    assert actions.shape == (2, N) and actions.dtype == torch.long
    assert int(actions[0, 7:].abs().sum()) == 0  # padded nodes take the dummy action
    train = m.forward_train({**batch, Columns.ACTIONS: actions,
                             Columns.ACTION_DIST_INPUTS: out[Columns.ACTION_DIST_INPUTS].detach()})
    dist = m.get_train_action_dist_cls().from_logits(train[Columns.ACTION_DIST_INPUTS])
    logp = dist.logp(actions)
    assert torch.allclose(logp, out[Columns.ACTION_LOGP], atol=1e-5)
    if not grouper:
        # near uniform at the start: about log(1/D) per real node
        assert torch.allclose(logp, torch.tensor([7.0, 12.0]) * math.log(1 / D), atol=0.05)
    else:
        groups = dist.assignment
        # nodes of a group share its device; the grouping's own logp is part of the placement's
        for row in range(2):
            for g in groups[row][groups[row] >= 0].unique():
                assert actions[row][groups[row] == g].unique().numel() == 1
        assert bool((dist.group_logp < 0).all())
    logp.sum().backward()
    missing = [n for n, q in m.net.named_parameters() if q.grad is None or not q.grad.abs().sum() > 0]
    assert not missing, missing
    greedy = m.forward_inference(batch)[Columns.ACTIONS]
    assert torch.equal(greedy, m.forward_inference(batch)[Columns.ACTIONS])


def test_decoder_is_autoregressive():
    """The device chosen for an op changes the logits of the ops after it, not before."""
    m = module()
    batch = chain_batch(sizes=(12,))
    a = torch.zeros(1, N, dtype=torch.long)
    b = a.clone()
    b[0, 5] = 2
    la = m.forward_train({**batch, Columns.ACTIONS: a})[Columns.ACTION_DIST_INPUTS][0, : N * D]
    lb = m.forward_train({**batch, Columns.ACTIONS: b})[Columns.ACTION_DIST_INPUTS][0, : N * D]
    diff = (la - lb).reshape(N, D).abs().sum(-1)
    assert float(diff[:6].max().detach()) == 0.0 and bool((diff[6:] > 0).all())


@pytest.fixture(scope="module")
def tiny_profile():
    from envs.profiling import record

    # modeled devices only, so the figures do not depend on how busy the machine is:
    # SLOW runs every op 3 times as long as GPU_MODEL
    prof = record("tiny_cnn", [], ["GPU_MODEL"], fit=0, progress=False)
    prof.devices["SLOW"] = {"kind": "modeled", "description": "GPU_MODEL at a third of the speed"}
    prof.op_time_s["SLOW"] = {k: 3 * v for k, v in prof.op_time_s["GPU_MODEL"].items()}
    prof.boundary_s = 5e-4  # splitting is not free: the single-device placements stand out
    return prof


@pytest.fixture
def local_ray():
    import ray

    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.own_ray
def test_training_raises_the_probability_of_the_faster_placement(tiny_profile, local_ray):
    """The sign test: two devices, one whole-graph placement much faster than the other;
    after a few REINFORCE updates (the real RLlib algorithm and learner) the faster one is
    clearly more likely than the slower one. Measured: the log-ratio went 0.00 -> 52 over 5
    updates; with the advantages' sign flipped it went to -11 (the slower one wins)."""
    from envs.placement_env import PlacementEnv
    from hsdag_ray.run.algos import algo_config
    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.resolve import env_config
    from policies.registry import get

    cfg = TrainConfig.of(model="tiny_cnn", method="rnn", env_runners=0, seed=0, lr=1e-2,
                      wandb="disabled")
    env_cfg = env_config(cfg, "simulator", list(tiny_profile.device_names), tiny_profile.to_json(), "")
    assert env_cfg["reward"] == "neg_sqrt"  # the method's own reward when none is given
    env = PlacementEnv(env_cfg)
    n = env.graph.num_nodes
    singles = [env.measure_untracked(np.full(n, d)).latency_s for d in range(2)]
    fast, slow = int(np.argmin(singles)), int(np.argmax(singles))
    assert singles[slow] > 2 * singles[fast]
    algo = algo_config(cfg, get("rnn"), env_cfg, False, env.steps_per_episode).build_algo()
    try:
        obs = {k: torch.as_tensor(v)[None] for k, v in env.reset()[0].items()}

        def logp(device: int) -> float:
            m = algo.get_module()  # the acting copy, synced after every update
            a = torch.full((1, env.max_nodes), device, dtype=torch.long)
            with torch.no_grad():  # teacher forcing scores a given placement (inference_only allows no forward_train)
                inputs = m._forward_train({Columns.OBS: obs, Columns.ACTIONS: a})[Columns.ACTION_DIST_INPUTS]
            return float(m.get_train_action_dist_cls().from_logits(inputs).logp(a)[0])

        gap0 = logp(fast) - logp(slow)
        gaps = []
        for _ in range(ITERATIONS):
            algo.train()
            gaps.append(logp(fast) - logp(slow))
        gap = gaps[-1]
    finally:
        algo.stop()
    assert abs(gap0) < 0.5, gap0  # near uniform at the start
    assert gap > 2.0, (gap0, gaps)  # the faster placement is now e^2 times as likely or more
