"""Placeto's network and RLModule on hand-made DAGs: sets, shapes, padding, message reach."""
import numpy as np
import pytest
import torch

from envs.observation import pad_graph_observation
from envs.placeto_env import placeto_spaces
from hsdag_core.reach import Reachability
from policies.placeto.policy import PlacetoConfig, PlacetoNet, split_around

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process

# 0 -> 1 -> 3 -> 4 -> 5, 0 -> 2 -> 3, 2 -> 6 (7 nodes)
EDGES = np.array([[0, 0, 1, 2, 3, 4, 2],
                  [1, 2, 3, 3, 4, 5, 6]])
N, F, D = 7, 5, 3


def hops(edges: np.ndarray, n: int, k: int, reverse: bool = False) -> list[set]:
    """For every node u, the nodes reached from u by a path of at most k edges (u included)."""
    src, dst = (edges[1], edges[0]) if reverse else (edges[0], edges[1])
    out = []
    for u in range(n):
        seen, front = {u}, {u}
        for _ in range(k):
            front = {int(d) for s, d in zip(src, dst) if s in front}
            seen |= front
        out.append(seen)
    return out


def observation(x: np.ndarray, current: int, max_nodes: int, max_edges: int) -> dict:
    r = Reachability.of(EDGES, N)
    obs = pad_graph_observation(x, EDGES, max_nodes, max_edges)
    anc = np.zeros(max_nodes, np.uint8)
    desc = np.zeros(max_nodes, np.uint8)
    anc[:N] = r.ancestors(current)
    desc[:N] = r.descendants(current)
    obs.update(current=np.array([current]), ancestors=anc, descendants=desc)
    return obs


def module(max_nodes: int, max_edges: int, seed: int = 0, rounds: int = 2):
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from policies.placeto.module import PlacetoRLModule

    obs_space, act_space = placeto_spaces(max_nodes, max_edges, F, D)
    torch.manual_seed(seed)
    return RLModuleSpec(module_class=PlacetoRLModule, observation_space=obs_space,
                        action_space=act_space,
                        model_config={"hidden_dim": 16, "rounds": rounds}).build()


def batch_of(observations: list[dict]) -> dict:
    return {"obs": {k: torch.as_tensor(np.stack([o[k] for o in observations]))
                    for k in observations[0]}}


def test_split_around_gives_exact_sets_on_a_union_of_two_graphs():
    r = Reachability.of(EDGES, N)
    # two copies of the DAG in one union; current node 3 in the first, 6 in the second
    anc = np.concatenate([r.ancestors(3), r.ancestors(6)])
    desc = np.concatenate([r.descendants(3), r.descendants(6)])
    a, d, p = split_around(torch.tensor([3, N + 6]), torch.as_tensor(anc), torch.as_tensor(desc),
                           2 * N)
    assert set(torch.nonzero(a).ravel().tolist()) == {0, 1, 2, N + 0, N + 2}
    assert set(torch.nonzero(d).ravel().tolist()) == {4, 5}
    # parallel: neither ancestor, descendant nor current, in each graph
    assert set(torch.nonzero(p).ravel().tolist()) == {6, N + 1, N + 3, N + 4, N + 5}
    with pytest.raises(ValueError, match="not a DAG"):
        split_around(torch.tensor([0]), torch.ones(3, dtype=torch.bool),
                     torch.ones(3, dtype=torch.bool), 3)


def test_forward_and_backward_passing_reach_exactly_k_hops():
    torch.manual_seed(0)
    net = PlacetoNet(F, D, PlacetoConfig(hidden_dim=8, rounds=2)).double()
    x = torch.randn(N, F, dtype=torch.float64)
    ei = torch.as_tensor(EDGES)
    base = net.embed(x, ei)
    down, up = hops(EDGES, N, 2), hops(EDGES, N, 2, reverse=True)
    for u in range(N):
        x2 = x.clone()
        x2[u] += 1.0
        out = net.embed(x2, ei)
        changed_fwd = {v for v in range(N) if not torch.equal(out.forward[v], base.forward[v])}
        changed_bwd = {v for v in range(N) if not torch.equal(out.backward[v], base.backward[v])}
        # forward messages go parent -> child: u's change reaches what u reaches in 2 edges
        assert changed_fwd == down[u], u
        # backward messages go child -> parent: u's change reaches its ancestors within 2 edges
        assert changed_bwd == up[u], u
    # with 0 rounds the passes are the input embedding
    net0 = PlacetoNet(F, D, PlacetoConfig(hidden_dim=8, rounds=0)).double()
    e0 = net0.embed(x, ei)
    assert torch.equal(e0.forward, e0.own) and torch.equal(e0.backward, e0.own)


def test_module_logits_shapes_and_padding():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(N, F)).astype(np.float32)
    small = module(N, EDGES.shape[1])
    obs = [observation(x, c, N, EDGES.shape[1]) for c in range(N)]
    out = small.forward_inference(batch_of(obs))["action_dist_inputs"]
    assert out.shape == (N, D) and torch.isfinite(out).all()
    # the same weights on a padded observation (more node and edge slots, garbage in the
    # padded rows) give the same logits: padded nodes are not part of any set
    big = module(N + 4, EDGES.shape[1] + 3)
    big.load_state_dict(small.state_dict())
    padded = []
    for c in range(N):
        o = observation(x, c, N + 4, EDGES.shape[1] + 3)
        o["x"][N:] = 100.0
        padded.append(o)
    out_big = big.forward_inference(batch_of(padded))["action_dist_inputs"]
    assert torch.allclose(out, out_big, atol=1e-5)
    # the logits depend on which node is current
    assert not torch.allclose(out[0], out[3])
    # a current node on a padded slot is refused
    bad = observation(x, 0, N + 4, EDGES.shape[1] + 3)
    bad["current"][0] = N + 1
    with pytest.raises(ValueError, match="padded slot"):
        big.forward_inference(batch_of([bad]))


def test_policy_starts_near_uniform_and_trains_end_to_end():
    m = module(N, EDGES.shape[1])
    x = np.random.default_rng(2).normal(size=(N, F)).astype(np.float32)
    batch = batch_of([observation(x, c, N, EDGES.shape[1]) for c in range(N)])
    out = m.forward_train(batch)
    p = torch.softmax(out["action_dist_inputs"], -1)
    assert torch.allclose(p, torch.full_like(p, 1 / D), atol=0.02)
    values = m.compute_values(batch, out["embeddings"])
    assert values.shape == (N,)
    # every parameter gets a gradient from the policy output
    out["action_dist_inputs"][:, 0].sum().backward()
    missing = [n for n, q in m.net.named_parameters() if q.grad is None or not q.grad.abs().sum() > 0]
    assert not missing, missing
