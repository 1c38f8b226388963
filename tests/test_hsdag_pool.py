"""Tests of the HSDAG policy network's grouping and pooling: exact checks on hand-made
graphs with hand-set weights (PyG's pooling tests are the model).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.utils import to_dense_adj

from policies.distributions import GroupedPlacementDistribution
from policies.hsdag.policy import GraphParsingPool, HSDAGConfig, HSDAGNet, dominant_edges
from hsdag_cases import linear_dot_pool, random_dag

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process

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
