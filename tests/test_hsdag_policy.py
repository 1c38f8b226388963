"""Tests of the HSDAG policy network, its grouped placement distribution and its RLModule.

Exact checks on hand-made graphs with hand-set weights (PyG's pooling tests are
the model), property checks with random weights on random DAGs, and learning
checks: REINFORCE in plain torch and one PPO iteration through RLlib.
"""
from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from ray.rllib.core.columns import Columns
from torch_geometric.utils import to_dense_adj

from policies.distributions import (
    GroupedPlacementDistribution,
    pack_dist_inputs,
    representatives,
)
from envs.observation import pad_graph_observation, placement_spaces, unpad_graphs
from policies.hsdag.policy import GraphParsingPool, HSDAGConfig, HSDAGNet, dominant_edges
from policies.hsdag.module import HSDAGRLModule

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process

# ----------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------


def linear_dot_pool(channels: int = 2, weight=(1.0, 0.0)) -> GraphParsingPool:
    """A pool whose score is sigmoid(w . (z_u * z_v)) with a hand-set w and b = 0."""
    pool = GraphParsingPool(channels, score_layers=1)
    with torch.no_grad():
        lin = pool.score_mlp[0]
        lin.weight.copy_(torch.tensor([weight]))
        lin.bias.zero_()
    return pool


def random_dag(num_nodes: int, extra_edges: int, gen: torch.Generator) -> torch.Tensor:
    """A connected DAG: each node v > 0 has a parent u < v, plus random forward edges."""
    parents = [int(torch.randint(0, v, (1,), generator=gen)) for v in range(1, num_nodes)]
    src, dst = parents, list(range(1, num_nodes))
    for _ in range(extra_edges):
        a, b = sorted(torch.randperm(num_nodes, generator=gen)[:2].tolist())
        src.append(a)
        dst.append(b)
    return torch.tensor([src, dst], dtype=torch.long)


def connected_in(edge_index: torch.Tensor, nodes: list[int]) -> bool:
    """Whether ``nodes`` induce a connected subgraph of the undirected graph."""
    members = set(nodes)
    adj = {v: set() for v in members}
    for u, v in edge_index.t().tolist():
        if u in members and v in members:
            adj[u].add(v)
            adj[v].add(u)
    seen, stack = {nodes[0]}, [nodes[0]]
    while stack:
        for w in adj[stack.pop()] - seen:
            seen.add(w)
            stack.append(w)
    return seen == members


SIX_NODE_EDGES = [[0, 1, 2, 0, 3, 4], [1, 2, 5, 3, 4, 5]]


def two_padded_observations(max_nodes: int = 10, max_edges: int = 12, features: int = 3):
    rng = np.random.default_rng(0)
    g1 = pad_graph_observation(rng.normal(size=(6, features)), SIX_NODE_EDGES, max_nodes, max_edges)
    chain = [list(range(7)), list(range(1, 8))]
    g2 = pad_graph_observation(rng.normal(size=(8, features)), chain, max_nodes, max_edges)
    return {k: torch.as_tensor(np.stack([g1[k], g2[k]])) for k in g1}


def make_module(max_nodes=10, max_edges=12, features=3, devices=2, **model_config) -> HSDAGRLModule:
    obs_space, act_space = placement_spaces(max_nodes, max_edges, features, devices)
    config = {"hidden_dim": 16, **model_config}
    return HSDAGRLModule(observation_space=obs_space, action_space=act_space, model_config=config)


# ----------------------------------------------------------------------------------
# Grouping and pooling: exact results with fixed weights
# ----------------------------------------------------------------------------------
# 8-node DAG: 0->1->2->3->4->5->6->7 plus the skip edge 1->5.
EIGHT_EDGES = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 1], [1, 2, 3, 4, 5, 6, 7, 5]])
# First coordinate drives the score (w = [1, 0]); the second must not matter.
EIGHT_Z = torch.tensor(
    [[2.0, 0.3], [2.0, -1.0], [0.5, 2.0], [-2.0, 0.0],
     [-2.0, 5.0], [-1.0, 1.0], [-3.0, -2.0], [-0.5, 0.7]]
)


def test_pool_exact_groups_scores_and_pooled_graph():
    pool = linear_dot_pool()
    grouping, pooled = pool(EIGHT_Z, EIGHT_EDGES)

    # z_u * z_v on the first coordinate, edge by edge.
    products = torch.tensor([4.0, 1.0, -1.0, 4.0, 2.0, 3.0, 1.5, -2.0])
    assert torch.allclose(grouping.edge_score, torch.sigmoid(products))
    # Dominant edges: 0,1 -> e0 (4); 2 -> e1 (1 > -1); 3,4 -> e3 (4); 5,6 -> e5 (3); 7 -> e6.
    assert grouping.dominant_edge.tolist() == [0, 0, 1, 3, 3, 5, 5, 6]
    assert grouping.assignment.tolist() == [0, 0, 0, 1, 1, 2, 2, 2]
    assert grouping.num_groups == 3
    assert grouping.group_batch.tolist() == [0, 0, 0]

    node_score = torch.sigmoid(torch.tensor([4.0, 4.0, 1.0, 4.0, 4.0, 3.0, 3.0, 1.5]))
    assert torch.allclose(grouping.node_score, node_score)
    # Pooled = score-gated mean of each group's rows, written out by hand
    # (s(x) = sigmoid(x)): g0 = {0, 1, 2}, g1 = {3, 4}, g2 = {5, 6, 7}.
    s1, s15, s3, s4 = (torch.sigmoid(torch.tensor(v)) for v in (1.0, 1.5, 3.0, 4.0))
    expected_x = torch.stack([
        torch.stack([(2 * s4 + 2 * s4 + 0.5 * s1) / 3, (0.3 * s4 - 1.0 * s4 + 2 * s1) / 3]),
        torch.stack([(-2 * s4 - 2 * s4) / 2, (0 * s4 + 5 * s4) / 2]),
        torch.stack([(-1 * s3 - 3 * s3 - 0.5 * s15) / 3, (1 * s3 - 2 * s3 + 0.7 * s15) / 3]),
    ])
    assert torch.allclose(pooled.x, expected_x)
    assert torch.allclose(pooled.x[1], torch.tensor([-1.96403, 2.45504]), atol=1e-5)  # -2 s(4), 2.5 s(4)
    # GPN's plain sum (reduce="sum") is the mean times the group size.
    summed = linear_dot_pool()
    summed.reduce = "sum"
    _, pooled_sum = summed(EIGHT_Z, EIGHT_EDGES)
    assert torch.allclose(pooled_sum.x, expected_x * torch.tensor([[3.0], [2.0], [3.0]]))

    # A' = S^T A S with the directed edges: e0,e1 in g0; e2: g0->g1; e3 in g1;
    # e4: g1->g2; e5,e6 in g2; e7 (1->5): g0->g2.
    dense = to_dense_adj(pooled.edge_index, edge_attr=pooled.edge_weight, max_num_nodes=3)[0]
    assert dense.tolist() == [[2.0, 1.0, 1.0], [0.0, 1.0, 1.0], [0.0, 0.0, 2.0]]
    s = torch.nn.functional.one_hot(grouping.assignment, 3).float()
    a = to_dense_adj(EIGHT_EDGES, max_num_nodes=8)[0]
    assert torch.equal(dense, s.t() @ a @ s)


def test_star_is_split_instead_of_collapsed():
    # Star: center 0, leaves 1..8, edge 0->i; score sigmoid(z_0 * z_i) = sigmoid(i / 10).
    edges = torch.tensor([[0] * 8, list(range(1, 9))])
    z = torch.tensor([[1.0, 0.0]] + [[i / 10, 0.0] for i in range(1, 9)])
    pool = linear_dot_pool()
    grouping, pooled = pool(z, edges)
    # Every leaf's only edge is dominant: plain dominant-edge components are one group.
    dom = dominant_edges(edges, grouping.edge_score, 9)
    assert dom.tolist() == [7, 0, 1, 2, 3, 4, 5, 6, 7]
    # The rule drops the weakest dominant edge (0-1), so leaf 1 is alone.
    assert grouping.assignment.tolist() == [0, 1, 0, 0, 0, 0, 0, 0, 0]
    assert grouping.num_groups == 2
    # Node 1 still reports its dominant edge's score (it gates its pooled feature).
    assert torch.isclose(grouping.node_score[1], torch.sigmoid(torch.tensor(0.1)))
    assert pooled.x.shape == (2, 2)


def test_ties_go_to_the_lowest_edge_index():
    # Path 0->1->2 with equal scores: node 1 keeps e0; all three would form one
    # group, so the weakest dominant edge (tie: lowest index, e0) is dropped.
    edges = torch.tensor([[0, 1], [1, 2]])
    z = torch.ones(3, 2)
    grouping, _ = linear_dot_pool()(z, edges)
    assert grouping.dominant_edge.tolist() == [0, 0, 1]
    assert grouping.assignment.tolist() == [0, 1, 1]


def test_isolated_nodes_and_self_loops_are_their_own_groups():
    # Node 2 has only a self-loop, node 3 has no edge at all.
    edges = torch.tensor([[0, 2], [1, 2]])
    z = torch.tensor([[1.0, 0.0], [1.0, 0.0], [3.0, 0.0], [1.0, 0.0]])
    grouping, pooled = linear_dot_pool()(z, edges)
    assert grouping.dominant_edge.tolist() == [0, 0, -1, -1]
    assert grouping.assignment.tolist() == [0, 0, 1, 2]
    assert grouping.node_score[2:].tolist() == [1.0, 1.0]
    assert torch.allclose(pooled.x[1], z[2]) and torch.allclose(pooled.x[2], z[3])


def test_given_assignment_is_used_and_scores_still_get_gradients():
    pool = linear_dot_pool()
    z = EIGHT_Z.clone().requires_grad_(True)
    given = torch.tensor([5, 5, 7, 7, 7, 9, 9, 9])
    grouping, pooled = pool(z, EIGHT_EDGES, assignment=given)
    assert grouping.assignment.tolist() == [0, 0, 1, 1, 1, 2, 2, 2]
    pooled.x.sum().backward()
    assert pool.score_mlp[0].weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="spans two graphs"):
        pool(EIGHT_Z, EIGHT_EDGES, batch=torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]), assignment=given)


def test_mean_pooling_does_not_grow_with_the_group():
    # Path 0-1-...-7 split by hand into groups of 2 and 6 nodes with equal states:
    # both pool to the same vector (the mean), a sum would be 3x larger for the big one.
    edges = torch.tensor([list(range(7)), list(range(1, 8))])
    z = torch.tensor([[1.0, 2.0]]).repeat(8, 1)
    given = torch.tensor([0, 0, 1, 1, 1, 1, 1, 1])
    grouping, pooled = linear_dot_pool()(z, edges, assignment=given)
    s1 = torch.sigmoid(torch.tensor(1.0))  # every edge scores sigmoid(1 * 1)
    assert torch.allclose(grouping.node_score, s1.expand(8))
    assert torch.allclose(pooled.x, (s1 * torch.tensor([1.0, 2.0])).expand(2, 2))


@pytest.mark.parametrize("self_loops", [False, True])
def test_scoring_only_the_dominant_edges_with_gradients_changes_nothing(self_loops):
    """The pool scores every edge without gradients (in chunks) and the dominant ones
    again with them; values and gradients equal those of scoring every edge with them."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    n = 300
    edges = random_dag(n, extra_edges=n, gen=gen)
    pool = GraphParsingPool(8, score_layers=2, self_loops=self_loops)
    pool.score_chunk = 64  # several chunks
    z = torch.randn(n, 8, generator=gen, requires_grad=True)
    weights = torch.randn(n, generator=gen)
    grouping, pooled = pool(z, edges)
    ((grouping.node_score * weights).sum() + pooled.x.square().sum()).backward()
    grads = [z.grad.clone()] + [p.grad.clone() for p in pool.score_mlp.parameters()]

    # reference: every candidate edge scored with gradients, the gates read from them
    z.grad = None
    pool.zero_grad()
    parse_index = edges
    if self_loops:
        loops = torch.arange(n)
        parse_index = torch.cat([edges, torch.stack([loops, loops])], 1)
    every = pool.score_edges(z, parse_index)
    dom = dominant_edges(parse_index, every, n, self_loops)
    assert torch.equal(dom, grouping.dominant_edge)
    assert torch.allclose(every[: edges.size(1)], grouping.edge_score, atol=1e-6)
    gate = torch.where(dom >= 0, every[dom.clamp(min=0)], torch.ones(n))
    assert torch.allclose(gate, grouping.node_score, atol=1e-6)
    sizes = torch.bincount(grouping.assignment).unsqueeze(-1).float()
    ref_x = torch.zeros(grouping.num_groups, 8).index_add(0, grouping.assignment, z * gate[:, None]) / sizes
    ((gate * weights).sum() + ref_x.square().sum()).backward()
    ref = [z.grad] + [p.grad for p in pool.score_mlp.parameters()]
    for got, want in zip(grads, ref):
        assert torch.allclose(got, want, atol=1e-5)
    assert all(g.abs().sum() > 0 for g in grads)
    # without gradients the gates are the no-gradient scores themselves
    with torch.no_grad():
        again, _ = pool(z, edges)
    assert torch.allclose(again.node_score, grouping.node_score, atol=1e-6)


def test_one_shared_sparse_adjacency_embeds_as_the_per_layer_gcn_normalisation():
    """The GCN layers share one normalised sparse adjacency; the embedding and its
    gradients equal those of GCNConv normalising the undirected edges at every layer."""
    from torch_geometric.nn import GCNConv
    from torch_geometric.utils import to_undirected

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    n = 200
    edges = torch.cat([random_dag(120, 150, gen), random_dag(80, 90, gen) + 120], 1)
    batch = torch.cat([torch.zeros(120, dtype=torch.long), torch.ones(80, dtype=torch.long)])
    net = HSDAGNet(5, 2, HSDAGConfig(hidden_dim=16, num_gcn_layers=3))
    x = torch.randn(n, 5, generator=gen)
    got = net.embed(x, edges, batch, 2)
    got.square().sum().backward()
    grads = {k: p.grad.clone() for k, p in net.named_parameters() if p.grad is not None}
    assert {k.split(".")[0] for k in grads} >= {"input_mlp", "convs", "graph_norms"}

    net.zero_grad()  # reference: the per-edge messages of GCNConv(normalize=True)
    reference = [GCNConv(16, 16) for _ in net.convs]
    for ref, conv in zip(reference, net.convs):
        ref.lin, ref.bias = conv.lin, conv.bias
    h = net.graph_norms[0](net.input_mlp(x), batch, 2)
    undirected = to_undirected(edges, num_nodes=n)
    for i, ref in enumerate(reference):
        h = net.graph_norms[i + 1](ref(h, undirected), batch, 2)
        h = F.relu(h) if i < len(reference) - 1 else h
    assert torch.allclose(got, h, atol=1e-5)
    h.square().sum().backward()
    # float sums in another order: compare at the scale of the gradients (a conv bias
    # before a GraphNorm has a gradient of 0 up to such rounding)
    scale = max(float(g.abs().max()) for g in grads.values())
    for k, p in net.named_parameters():
        if k in grads:
            assert float((p.grad - grads[k]).abs().max()) <= 1e-5 * scale, k


@pytest.mark.parametrize("moves", [False, True])
def test_group_terms_read_at_the_representatives_equal_the_per_node_ones(moves):
    """logp, entropy and kl evaluate each group's categorical once, at its
    representative; values and gradients equal the per-node evaluation (every node's
    categorical, summed at the representatives), with padding, D = 3, a [2, 3] batch."""
    from policies.hsdag.move_distribution import GroupedMoveDistribution

    gen = torch.Generator().manual_seed(0)
    shape, n, d = (2, 3), 30, 3
    logits = torch.randn(*shape, n, d, generator=gen, requires_grad=True)
    move_logits = torch.randn(*shape, n, generator=gen, requires_grad=True)
    assignment = torch.sort(torch.randint(0, 9, (*shape, n), generator=gen), -1).values
    assignment[0, 1, 20:] = -1  # padding
    action = torch.randint(0, d, (*shape, n), generator=gen)
    other = torch.randn(*shape, n, d, generator=gen)

    def make(lg):
        if moves:
            return GroupedMoveDistribution(lg, assignment, move_logits)
        return GroupedPlacementDistribution(lg, assignment)

    dist = make(logits)
    got = [dist.logp(action), dist.entropy(), dist.kl(make(other))]
    per_node = dist._dist  # every node's categorical
    want = [dist.marginal(*dist.node_terms(action)) if moves else
            dist._sum_over_groups(per_node.log_prob(action)),
            dist._sum_over_groups(per_node.entropy()),
            dist._sum_over_groups(torch.distributions.kl_divergence(per_node, make(other)._dist))]
    if moves:
        bern = GroupedMoveDistribution.entropy(dist) - GroupedPlacementDistribution.entropy(dist)
        want[1] = want[1] + bern
        want[2] = GroupedMoveDistribution.kl(dist, make(other))  # same code path: only shapes
    weights = torch.randn(3, *shape, generator=gen)
    for g, w, k in zip(got, want, weights):
        assert g.shape == shape
        assert torch.allclose(g, w, atol=1e-5)
        params = [logits, move_logits] if moves else [logits]
        dg = torch.autograd.grad((g * k).sum(), params, retain_graph=True, allow_unused=True)
        dw = torch.autograd.grad((w * k).sum(), params, retain_graph=True, allow_unused=True)
        for a, b in zip(dg, dw):
            assert (a is None) == (b is None) or (a if a is not None else b).abs().sum() == 0
            if a is not None and b is not None:
                assert torch.allclose(a, b, atol=1e-5)
    # a sample shape in front of the batch still broadcasts (the per-node path)
    samples = dist.sample(sample_shape=(4,))
    assert dist.logp(samples).shape == (4, *shape)


def test_unique_ids_without_a_sort_equal_torch_unique():
    from policies.layers import unique_ids

    gen = torch.Generator().manual_seed(0)
    cases = [torch.randint(0, 50, (300,), generator=gen), torch.tensor([7, 7, 2, 9, 2]),
             torch.randint(0, 10**9, (20,), generator=gen), torch.zeros(0, dtype=torch.long)]
    for ids in cases:
        want = torch.unique(ids, return_inverse=True)
        got = unique_ids(ids)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_self_loops_let_a_node_stay_alone():
    # Path 0-1-2-3-4, score = sigmoid(z_u * z_v) on the first coordinate; a loop
    # scores sigmoid(z_v^2). Node 0's loop (9) beats its edge (-0.6) and node 1
    # prefers its own loop (0.04) to both edges (-0.6, -0.4), so nobody's dominant
    # edge reaches 0 or 1: two single-node groups. Node 2 ties its loop with
    # edge (2,3) (both 4): the lower index, the edge, wins.
    edges = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    z = torch.tensor([[3.0, 0.0], [-0.2, 0.0], [2.0, 0.0], [2.0, 0.0], [0.1, 0.0]])
    pool = linear_dot_pool()
    pool.self_loops = True
    grouping, pooled = pool(z, edges)
    assert grouping.assignment.tolist() == [0, 1, 2, 2, 2]
    assert grouping.dominant_edge.tolist() == [4 + 0, 4 + 1, 2, 2, 3]  # E + v = v's loop
    assert grouping.edge_score.shape == (4,)
    s = torch.sigmoid
    assert torch.allclose(grouping.node_score,
                          s(torch.tensor([9.0, 0.04, 4.0, 4.0, 0.2])))
    assert torch.allclose(pooled.x[0], z[0] * s(torch.tensor(9.0)))
    # Without loops GPN's parsing joins everything and the no-collapse rule
    # drops the weakest dominant edge (0,1): node 0 alone, the rest one group.
    pool.self_loops = False
    assert pool(z, edges)[0].assignment.tolist() == [0, 1, 1, 1, 1]
    # A node that chose its loop still joins a neighbour whose dominant edge
    # reaches it: 0 and 3 choose loops, 1 and 2 pick edges to them.
    z2 = torch.tensor([[2.0, 0.0], [1.0, 0.0], [-1.0, 0.0], [-2.0, 0.0]])
    pool.self_loops = True
    g2, _ = pool(z2, torch.tensor([[0, 1, 2], [1, 2, 3]]))
    assert g2.dominant_edge.tolist() == [3 + 0, 0, 2, 3 + 3]
    assert g2.assignment.tolist() == [0, 0, 1, 1]


@pytest.mark.parametrize("seed", range(4))
def test_self_loop_parsing_keeps_the_grouping_properties(seed):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    net = HSDAGNet(4, num_devices=2, config=HSDAGConfig(hidden_dim=8, self_loops=True))
    x, edges = torch.randn(30, 4, generator=gen), random_dag(30, 10, gen)
    for noise in (0.0, 1.0):
        g = net(x, edges, grouping_noise=noise).grouping
        assert g.num_groups >= 2
        assert sorted(set(g.assignment.tolist())) == list(range(g.num_groups))
        for k in range(g.num_groups):
            assert connected_in(edges, (g.assignment == k).nonzero().view(-1).tolist())
    # a single edge whose two loops beat it: two groups, never fewer
    pair = net(torch.randn(2, 4, generator=gen), torch.tensor([[0], [1]])).grouping
    assert pair.num_groups == 2


def test_grouping_noise_explores_groupings_only_when_sampling():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(3)
    net = HSDAGNet(4, num_devices=2, config=HSDAGConfig(hidden_dim=8))
    x, edges = torch.randn(30, 4, generator=gen), random_dag(30, 10, gen)
    plain = net(x, edges).grouping.assignment
    assert torch.equal(net(x, edges, grouping_noise=0.0).grouping.assignment, plain)
    noisy = [net(x, edges, grouping_noise=1.0) for _ in range(10)]
    assert len({tuple(o.grouping.assignment.tolist()) for o in noisy}) >= 3
    for out in noisy:
        g = out.grouping
        assert g.num_groups >= 2
        for k in range(g.num_groups):  # still connected groups of dominant edges
            assert connected_in(edges, (g.assignment == k).nonzero().view(-1).tolist())
        # Re-pooling the sampled grouping without noise gives the same logits.
        again = net(x, edges, assignment=g.assignment)
        assert torch.allclose(again.node_logits, out.node_logits, atol=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_one_adam_step_does_not_make_the_placer_deterministic(seed):
    """The collapse: with sum pooling and no normalisation one REINFORCE step
    (Adam, the paper's lr 1e-3) moved group logit gaps by 1.5-5.5."""
    from policies.reinforce import advantages

    def max_gap_change(config: HSDAGConfig) -> float:
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)
        x, edges = torch.rand(40, 12, generator=gen) * 3, random_dag(40, 20, gen)
        net = HSDAGNet(12, 2, config)
        optim = torch.optim.Adam(net.parameters(), lr=1e-3)
        out = net(x, edges)
        dist = torch.distributions.Categorical(logits=out.group_logits)
        actions = torch.stack([dist.sample() for _ in range(20)])
        adv = advantages(torch.rand(20, generator=gen), torch.ones(20))
        loss = -(dist.log_prob(actions).sum(-1) * adv).mean()
        optim.zero_grad()
        loss.backward()
        optim.step()
        after = net(x, edges, assignment=out.grouping.assignment).group_logits.detach()
        before = out.group_logits.detach()
        return float(((after[:, 1] - after[:, 0]) - (before[:, 1] - before[:, 0])).abs().max())

    assert max_gap_change(HSDAGConfig()) < 1.0
    assert max_gap_change(HSDAGConfig(pooling="sum", graph_norm=False, group_norm=False,
                                       self_loops=False)) > 1.5


def test_graph_norm_keeps_node_embeddings_apart():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    x, edges = torch.rand(40, 12, generator=gen) * 3, random_dag(40, 20, gen)

    def mean_cosine(config: HSDAGConfig) -> float:
        torch.manual_seed(0)
        z = HSDAGNet(12, 2, config).embed(x, edges).detach()
        z = z / z.norm(dim=1, keepdim=True)
        c = z @ z.t()
        return float(c[~torch.eye(40, dtype=torch.bool)].mean())

    assert abs(mean_cosine(HSDAGConfig())) < 0.3
    assert mean_cosine(HSDAGConfig(graph_norm=False)) > 0.8


def test_rank_advantages_by_hand():
    from policies.reinforce import advantages

    rewards = torch.tensor([[1.0, 3.0, 3.0, 2.0], [0.5, 9.0, 1.0, 7.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
    # Valid rewards sorted: 0.5, 1, 1, 2, 3, 3, 9 -> ranks 0, 1.5, 1.5, 3, 4.5, 4.5, 6;
    # centred: rank / 6 - 0.5; then divided by their std.
    centred = torch.tensor([[-0.25, 0.25, 0.25, 0.0], [-0.5, 0.5, -0.25, 0.0]])
    std = torch.sqrt((centred[mask > 0] ** 2).mean())
    assert torch.allclose(advantages(rewards, mask), centred / std)
    # Any monotone change of the rewards (e.g. a harsher failure penalty) changes nothing.
    assert torch.allclose(advantages(torch.exp(rewards) - 100.0, mask), centred / std)
    normalized = advantages(rewards, mask, "normalized")
    valid = rewards[mask > 0]
    assert torch.allclose(normalized[mask > 0], (valid - valid.mean()) / valid.std(unbiased=False))
    assert torch.equal(advantages(torch.ones(2, 3), torch.ones(2, 3)), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="unknown advantages"):
        advantages(rewards, mask, "median")


# ----------------------------------------------------------------------------------
# Properties with random weights on random DAGs
# ----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_grouping_properties_on_random_dags(seed):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    n = int(torch.randint(9, 40, (1,), generator=gen))
    edges = random_dag(n, extra_edges=n // 2, gen=gen)
    net = HSDAGNet(5, num_devices=3, config=HSDAGConfig(hidden_dim=8))
    out = net(torch.randn(n, 5, generator=gen), edges)
    g = out.grouping

    assert g.assignment.shape == (n,) and g.assignment.dtype == torch.long
    sizes = torch.bincount(g.assignment)
    assert sizes.numel() == g.num_groups and bool((sizes > 0).all())  # each node in exactly one group
    assert 2 <= g.num_groups <= n  # a connected graph never collapses
    assert bool(((g.edge_score >= 0) & (g.edge_score <= 1)).all())
    assert bool(((g.node_score >= 0) & (g.node_score <= 1)).all())
    # Groups are numbered by their first node, and each is connected in the DAG.
    firsts = [int((g.assignment == k).nonzero()[0]) for k in range(g.num_groups)]
    assert firsts == sorted(firsts)
    for k in range(g.num_groups):
        assert connected_in(edges, (g.assignment == k).nonzero().view(-1).tolist())
    # Every node carries its group's logits and its group's embedding as next state.
    assert torch.equal(out.node_logits, out.group_logits[g.assignment])
    assert torch.equal(out.next_node_state, out.pooled.x[g.assignment])
    assert out.graph_embedding.shape == (1, 8)


def test_batched_union_groups_each_graph_as_alone():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    net = HSDAGNet(4, num_devices=2, config=HSDAGConfig(hidden_dim=8))
    graphs = [(torch.randn(n, 4, generator=gen), random_dag(n, 3, gen)) for n in (9, 12, 10)]
    alone = [net(x, e) for x, e in graphs]

    xs, es, bs, offset = [], [], [], 0
    for i, (x, e) in enumerate(graphs):
        xs.append(x)
        es.append(e + offset)
        bs.append(torch.full((x.size(0),), i))
        offset += x.size(0)
    out = net(torch.cat(xs), torch.cat(es, 1), batch=torch.cat(bs), num_graphs=3)

    group_offset, node_offset = 0, 0
    for i, single in enumerate(alone):
        n = graphs[i][0].size(0)
        part = out.grouping.assignment[node_offset : node_offset + n] - group_offset
        assert torch.equal(part, single.grouping.assignment)
        logits = out.node_logits[node_offset : node_offset + n]
        assert torch.allclose(logits, single.node_logits, atol=1e-5)
        assert torch.allclose(out.graph_embedding[i], single.graph_embedding[0], atol=1e-5)
        group_offset += single.grouping.num_groups
        node_offset += n
    assert out.grouping.group_batch.tolist() == sum(
        ([i] * s.grouping.num_groups for i, s in enumerate(alone)), []
    )


def test_gradients_reach_the_edge_scorer_and_every_layer():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    net = HSDAGNet(4, num_devices=3, config=HSDAGConfig(hidden_dim=8, pooled_gcn=True))
    edges = random_dag(12, 6, gen)
    out = net(torch.randn(12, 4, generator=gen), edges)
    # A policy-gradient-like loss on the placer's outputs only.
    target = torch.randint(0, 3, (out.grouping.num_groups,), generator=gen)
    loss = torch.nn.functional.cross_entropy(out.group_logits, target)
    loss.backward()
    for name, p in net.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert any(p.grad.abs().sum() > 0 for p in net.pool.score_mlp.parameters())


def test_node_state_changes_the_grouping_inputs():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    net = HSDAGNet(4, num_devices=2, config=HSDAGConfig(hidden_dim=8))
    x, edges = torch.randn(10, 4, generator=gen), random_dag(10, 4, gen)
    first = net(x, edges)
    second = net(x, edges, node_state=first.next_node_state)
    assert not torch.allclose(first.node_embedding, second.node_embedding)
    expected = net.state_norm(net.embed(x, edges) + first.next_node_state)
    assert torch.allclose(second.node_embedding, expected)


def test_reset_parameters_reinitialises():
    torch.manual_seed(0)
    net = HSDAGNet(4, num_devices=2, config=HSDAGConfig(hidden_dim=8, pooled_gcn=True))
    with torch.no_grad():
        for p in net.parameters():
            p.add_(1.0)
    before = {n: p.detach().clone() for n, p in net.named_parameters()}
    net.reset_parameters()
    # Every parameter is reset (norm layers to their constants, weights at random).
    for name, p in net.named_parameters():
        assert not torch.equal(before[name], p), name
    assert torch.equal(net.graph_norms[0].weight, torch.ones(8))
    assert torch.equal(net.group_norm.bias, torch.zeros(8))


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
