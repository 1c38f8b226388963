"""GDP's network and RLModule on hand-made DAGs: shapes, padding, the one-shot
distribution, the superposition, and the segment recurrence's bounded reach."""
import numpy as np
import pytest
import torch
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from envs.observation import pad_graph_observation, placement_spaces
from policies.gdp.policy import GDPConfig, GDPNet, SegmentRecurrentPlacer
from policies.gdp.module import GDPRLModule, unique_observations

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process

#: a 7-node DAG in topological order: a diamond 0->{1,2}->3, then a chain 3->4->5->6
EDGES = np.array([[0, 0, 1, 2, 3, 4, 5], [1, 2, 3, 3, 4, 5, 6]])
N, F, D = 7, 5, 3


def module(max_nodes: int = N, max_edges: int = EDGES.shape[1], **cfg) -> GDPRLModule:
    torch.manual_seed(0)
    obs, act = placement_spaces(max_nodes, max_edges, F, D)
    config = {"hidden_dim": 16, "heads": 2, "segment_len": 3, **cfg}
    return RLModuleSpec(module_class=GDPRLModule, observation_space=obs, action_space=act,
                        model_config=config).build()


def batch_of(observations: list[dict]) -> dict:
    return {"obs": {k: torch.as_tensor(np.stack([o[k] for o in observations]))
                    for k in observations[0]}}


def features(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(N, F)).astype(np.float32)


def test_one_shot_placement_shapes_and_distribution():
    m = module()
    b = batch_of([pad_graph_observation(features(0), EDGES, N, EDGES.shape[1]),
                  pad_graph_observation(features(1), EDGES, N, EDGES.shape[1])])
    out = m.forward_train(b)
    assert out["action_dist_inputs"].shape == (2, N * (D + 1))
    assert out["embeddings"].shape == (2, 16)
    dist = m.action_dist_cls.from_logits(out["action_dist_inputs"])
    # every node is a decision of its own: N groups per graph, one device per node
    assert dist.num_groups.tolist() == [N, N]
    a = dist.sample()
    assert a.shape == (2, N) and int(a.min()) >= 0 and int(a.max()) < D
    # a near-uniform first policy: logp of any placement is about -N log D
    assert torch.allclose(dist.logp(a), torch.full((2,), -N * np.log(D)), atol=0.05)
    assert torch.allclose(dist.entropy(), torch.full((2,), N * np.log(D)), atol=0.05)
    assert m.compute_values(b, out["embeddings"]).shape == (2,)
    # the two graphs' features differ, so do their logits
    logits = out["action_dist_inputs"][:, : N * D]
    assert not torch.allclose(logits[0], logits[1])
    # every parameter gets a gradient from the policy and value
    (dist.logp(a).sum() + m.compute_values(b, out["embeddings"]).sum()).backward()
    missing = [n for n, q in m.named_parameters() if q.grad is None or not q.grad.abs().sum() > 0]
    assert not missing, missing


def test_padding_changes_nothing():
    x = features(2)
    small = module()
    out = small.forward_inference(batch_of([pad_graph_observation(x, EDGES, N, EDGES.shape[1])]))
    big = module(N + 5, EDGES.shape[1] + 4)
    big.load_state_dict(small.state_dict())
    o = pad_graph_observation(x, EDGES, N + 5, EDGES.shape[1] + 4)
    o["x"][N:] = 100.0  # garbage in padded rows
    out_big = big.forward_inference(batch_of([o]))["action_dist_inputs"]
    logits, groups = out_big[0, : (N + 5) * D], out_big[0, (N + 5) * D:]
    assert torch.allclose(out["action_dist_inputs"][0, : N * D], logits[: N * D], atol=1e-5)
    assert groups.tolist() == list(range(N)) + [-1] * 5
    # padded nodes take the dummy action 0 and add nothing to logp
    dist = big.action_dist_cls.from_logits(out_big)
    assert dist.sample()[0, N:].tolist() == [0] * 5


def test_superposition_conditions_the_placer_on_the_graph():
    torch.manual_seed(0)
    cfg = GDPConfig(hidden_dim=16, heads=2, segment_len=2)
    net = GDPNet(F, D, cfg)
    # FiLM starts as the identity: the same logits as a net without superposition
    plain = GDPNet(F, D, GDPConfig(hidden_dim=16, heads=2, segment_len=2, superposition=False))
    plain.load_state_dict({k: v for k, v in net.state_dict().items() if not k.startswith("film")})
    x, ei = torch.as_tensor(features(3)), torch.as_tensor(EDGES)
    valid = torch.ones(1, N, dtype=torch.bool)
    batch = torch.zeros(N, dtype=torch.long)
    assert torch.allclose(net(x, ei, batch, valid).node_logits, plain(x, ei, batch, valid).node_logits)
    # once trained, the graph embedding scales each layer: node 0's logits change with a
    # feature of node 6 only through the graph embedding: node 0's segment is {0, 1}, and
    # GraphSAGE's 3 rounds reach 3 edges, which is short of node 6 from either
    with torch.no_grad():
        net.film.weight.normal_()
    x2 = x.clone()
    x2[6] += 5.0
    a = net(x, ei, batch, valid).node_logits[0, 0]
    b = net(x2, ei, batch, valid).node_logits[0, 0]
    assert not torch.allclose(a, b)
    a = plain(x, ei, batch, valid).node_logits[0, 0]
    b = plain(x2, ei, batch, valid).node_logits[0, 0]
    assert torch.equal(a, b)


def test_segment_recurrence_reaches_a_bounded_number_of_segments_back():
    torch.manual_seed(0)
    s, layers, n = 16, 2, 1000
    placer = SegmentRecurrentPlacer(32, layers, 4, s).double()
    h = torch.randn(2, n, 32, dtype=torch.float64)
    valid = torch.ones(2, n, dtype=torch.bool)
    valid[1, 900:] = False  # a shorter second graph
    out = placer(h, valid)
    assert out.shape == (2, n, 32) and torch.isfinite(out).all()
    # a change in segment 0 reaches exactly the next `layers` segments (memory of memory)
    h2 = h.clone()
    h2[:, 3] += 1.0
    out2 = placer(h2, valid)
    changed = [seg for seg in range(n // s)
               if not torch.equal(out[:, seg * s:(seg + 1) * s], out2[:, seg * s:(seg + 1) * s])]
    assert changed == list(range(layers + 1))
    # memory is detached: no gradient flows from a segment into the one before it
    h3 = h.clone().requires_grad_(True)
    placer(h3, valid)[:, s:2 * s].sum().backward()
    assert h3.grad[:, :s].abs().sum() == 0 and h3.grad[:, s:2 * s].abs().sum() > 0


def test_identical_observations_run_once_and_give_the_same_result():
    o = pad_graph_observation(features(4), EDGES, N, EDGES.shape[1])
    b = batch_of([o] * 5)
    uniq, index = unique_observations(b["obs"])
    assert uniq["x"].shape[0] == 1 and index.tolist() == [0] * 5
    m = module()
    out = m.forward_train(b)["action_dist_inputs"]
    assert out.shape == (5, N * (D + 1)) and torch.equal(out[0], out[4])
    other = pad_graph_observation(features(5), EDGES, N, EDGES.shape[1])
    mixed = batch_of([o, o, other, other, o])
    uniq, index = unique_observations(mixed["obs"])
    assert uniq["x"].shape[0] == 2 and index.tolist() == [0, 0, 1, 1, 0]
    assert unique_observations(batch_of([o, other])["obs"])[1] is None
    assert unique_observations(mixed["obs"], max_distinct=1)[1] is None
    out_mixed = m.forward_train(mixed)["action_dist_inputs"]
    assert torch.allclose(out_mixed[0], out[0], atol=1e-6)
    assert torch.equal(out_mixed[2], out_mixed[3]) and not torch.allclose(out_mixed[0], out_mixed[2])
    # the same as running every row: values and gradients
    m.zero_grad()
    m.forward_train(mixed)["action_dist_inputs"].square().sum().backward()
    collapsed = [None if q.grad is None else q.grad.clone() for q in m.parameters()]
    m.zero_grad()
    rows = [m.forward_train(batch_of([r]))["action_dist_inputs"] for r in (o, o, other, other, o)]
    torch.cat(rows).square().sum().backward()
    for q, g in zip(m.parameters(), collapsed):
        assert (q.grad is None) == (g is None)
        assert g is None or torch.allclose(q.grad, g, atol=1e-5)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="must divide"):
        GDPConfig(hidden_dim=10, heads=4)
    obs, _ = placement_spaces(N, 7, F, D)
    import gymnasium as gym
    with pytest.raises(ValueError, match="MultiDiscrete"):
        RLModuleSpec(module_class=GDPRLModule, observation_space=obs,
                     action_space=gym.spaces.Discrete(D)).build()


def saved_for_backward(placer: SegmentRecurrentPlacer, n: int) -> tuple[int, int]:
    """(total, largest) numbers of elements the placer keeps for backward on ``n`` nodes."""
    sizes: list[int] = []

    def pack(t):
        sizes.append(t.numel())
        return t

    h = torch.randn(1, n, 32, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        placer(h, torch.ones(1, n, dtype=torch.bool))
    return sum(sizes), max(sizes)


def test_segment_recurrence_memory_grows_linearly_with_the_sequence():
    torch.manual_seed(0)
    placer = SegmentRecurrentPlacer(32, 2, 4, 64)
    total_small, largest_small = saved_for_backward(placer, 2048)
    total_big, largest_big = saved_for_backward(placer, 8192)
    # 4x the nodes keeps 4x the activations (full attention would keep 16x: n^2 scores)
    assert 3.5 < total_big / total_small < 4.5, (total_small, total_big)
    # nothing kept comes near one head's all-pairs scores (8192^2 elements)
    assert largest_big < 8192**2 / 16, largest_big
