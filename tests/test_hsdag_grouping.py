"""Tests of the HSDAG policy network's grouping: self loops, grouping noise, graph norm and
rank advantages on hand-made graphs, and property checks with random weights on random DAGs.
"""
from __future__ import annotations

import pytest
import torch

from policies.hsdag.policy import HSDAGConfig, HSDAGNet
from hsdag_cases import connected_in, linear_dot_pool, random_dag

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process


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
