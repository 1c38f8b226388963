"""Graphs, pools and modules shared by the HSDAG policy tests (test_hsdag_pool.py,
test_hsdag_grouping.py, test_hsdag_module.py).
"""
from __future__ import annotations

import numpy as np
import torch

from envs.observation import pad_graph_observation, placement_spaces
from policies.hsdag.policy import GraphParsingPool
from policies.hsdag.module import HSDAGRLModule


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
