"""The observation every placement method sees: one graph, padded.

A placement environment observes its graph as a dict of fixed-size arrays (so
RLlib can batch observations of graphs of different sizes)::

    x           float32 [N_max, F]   node features (padded rows ignored)
    edge_index  int64   [2, E_max]   directed DAG edges src -> dst
    node_mask   float32 [N_max]      1 for real nodes
    edge_mask   float32 [E_max]      1 for real edges

and acts with ``MultiDiscrete([D] * N_max)``, one device per node (padded
nodes take the dummy action 0). :func:`placement_spaces` and
:func:`pad_graph_observation` build them; :func:`unpad_graphs` turns a batch of
them into one disjoint union of graphs (torch-geometric style) for a network,
and :func:`pad_node_values` scatters per-node outputs back to padded slots.
"""
from __future__ import annotations

from typing import Dict, NamedTuple, Tuple

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

__all__ = ["GraphBatch", "unpad_graphs", "pad_node_values", "placement_spaces",
           "pad_graph_observation", "read_placement_spaces", "OBS_KEYS"]

#: the keys of a placement observation
OBS_KEYS = ("x", "edge_index", "node_mask", "edge_mask")


class GraphBatch(NamedTuple):
    """A batch of padded graph observations as one disjoint union (PyG style).

    Attributes:
        x: ``[n, F]`` features of the real nodes, graph by graph.
        edge_index: ``[2, e]`` real edges, renumbered into the union.
        batch: ``[n]`` graph of each node.
        node_valid: ``[B, N_max]`` bool, which padded slots are real nodes (the
            union's nodes are ``node_valid``'s True entries in row-major order).
        num_graphs: ``B``.
    """

    x: Tensor
    edge_index: Tensor
    batch: Tensor
    node_valid: Tensor
    num_graphs: int


def unpad_graphs(x: Tensor, edge_index: Tensor, node_mask: Tensor, edge_mask: Tensor) -> GraphBatch:
    """Turns padded observations ``[B, N_max, F]``, ``[B, 2, E_max]``, ``[B, N_max]``,
    ``[B, E_max]`` into a :class:`GraphBatch`.

    Raises:
        ValueError: if a real edge points outside ``[0, N_max)`` or to a padded node.
    """
    num_graphs, max_nodes = node_mask.shape
    device = x.device
    valid = node_mask > 0.5
    flat_valid = valid.reshape(-1)
    new_id = torch.cumsum(flat_valid.long(), 0) - 1
    xs = x.reshape(num_graphs * max_nodes, -1)[flat_valid]
    batch = torch.arange(num_graphs, device=device).repeat_interleave(max_nodes)[flat_valid]

    edge_index = edge_index.long()
    real = edge_mask > 0.5
    if bool(real.any()):
        ends = edge_index.permute(1, 0, 2)[:, real]  # [2, e]
        if bool(((ends < 0) | (ends >= max_nodes)).any()):
            raise ValueError(
                f"A real edge (edge_mask=1) has an endpoint outside [0, {max_nodes}); "
                "edge_index must hold node slots of the padded observation."
            )
        offset = (torch.arange(num_graphs, device=device) * max_nodes).unsqueeze(1).expand_as(real)[real]
        ends = ends + offset
        if not bool(flat_valid[ends].all()):
            raise ValueError(
                "A real edge (edge_mask=1) touches a padded node (node_mask=0); "
                "mask the edge or mark the node as real."
            )
        union_edges = new_id[ends]
    else:
        union_edges = torch.empty(2, 0, dtype=torch.long, device=device)
    return GraphBatch(xs, union_edges, batch, valid, num_graphs)


def pad_node_values(values: Tensor, node_valid: Tensor, fill: float = 0.0) -> Tensor:
    """Scatters union values ``[n, ...]`` back to padded ``[B, N_max, ...]`` slots
    (a view of ``values`` when no slot is padded)."""
    num_graphs, max_nodes = node_valid.shape
    if values.size(0) == num_graphs * max_nodes:  # every slot is a real node
        return values.reshape(num_graphs, max_nodes, *values.shape[1:])
    out = values.new_full((num_graphs * max_nodes, *values.shape[1:]), fill)
    out[node_valid.reshape(-1)] = values
    return out.reshape(num_graphs, max_nodes, *values.shape[1:])


def placement_spaces(
    max_nodes: int, max_edges: int, num_features: int, num_devices: int
) -> Tuple[gym.spaces.Dict, gym.spaces.MultiDiscrete]:
    """The observation and action spaces of :class:`HSDAGRLModule`.

    Returns:
        ``(Dict(x: Box[N_max, F] float32, edge_index: Box[2, E_max] int64 in
        [0, N_max), node_mask: Box[N_max] in {0, 1}, edge_mask: Box[E_max] in {0, 1}),
        MultiDiscrete([D] * N_max))``.
    """
    if min(max_nodes, max_edges, num_features, num_devices) < 1:
        raise ValueError("max_nodes, max_edges, num_features and num_devices must all be >= 1.")
    obs = gym.spaces.Dict(
        {
            "x": gym.spaces.Box(-np.inf, np.inf, (max_nodes, num_features), np.float32),
            "edge_index": gym.spaces.Box(0, max_nodes - 1, (2, max_edges), np.int64),
            "node_mask": gym.spaces.Box(0.0, 1.0, (max_nodes,), np.float32),
            "edge_mask": gym.spaces.Box(0.0, 1.0, (max_edges,), np.float32),
        }
    )
    return obs, gym.spaces.MultiDiscrete([num_devices] * max_nodes)


def pad_graph_observation(
    x: np.ndarray, edge_index: np.ndarray, max_nodes: int, max_edges: int
) -> Dict[str, np.ndarray]:
    """Pads one graph (``x [n, F]``, ``edge_index [2, e]``) into the observation format."""
    x = np.asarray(x, dtype=np.float32)
    edge_index = np.asarray(edge_index, dtype=np.int64).reshape(2, -1)
    n, e = x.shape[0], edge_index.shape[1]
    if n > max_nodes or e > max_edges:
        raise ValueError(
            f"The graph has {n} nodes and {e} edges but the observation holds at most "
            f"{max_nodes} and {max_edges}; raise max_nodes/max_edges or coarsen the graph."
        )
    if e and (edge_index.min() < 0 or edge_index.max() >= n):
        raise ValueError(f"edge_index refers to nodes outside [0, {n}).")
    out_x = np.zeros((max_nodes, x.shape[1]), np.float32)
    out_x[:n] = x
    out_e = np.zeros((2, max_edges), np.int64)
    out_e[:, :e] = edge_index
    node_mask = np.zeros(max_nodes, np.float32)
    node_mask[:n] = 1.0
    edge_mask = np.zeros(max_edges, np.float32)
    edge_mask[:e] = 1.0
    return {"x": out_x, "edge_index": out_e, "node_mask": node_mask, "edge_mask": edge_mask}


def read_placement_spaces(observation_space: gym.Space, action_space: gym.Space,
                          who: str = "this module") -> Tuple[int, int, int, int]:
    """``(N_max, F, E_max, D)`` of placement spaces (:func:`placement_spaces`).

    Raises:
        ValueError: naming ``who``, if the spaces are not placement spaces.
    """
    expected = (
        "Dict(x: Box[N_max, F], edge_index: Box[2, E_max], node_mask: Box[N_max], "
        "edge_mask: Box[E_max])"
    )
    if not isinstance(observation_space, gym.spaces.Dict) or not set(OBS_KEYS) <= set(
        observation_space.spaces
    ):
        raise ValueError(
            f"{who} needs the observation space {expected} (see "
            f"envs.observation.placement_spaces); got {observation_space}."
        )
    max_nodes, num_features = observation_space["x"].shape
    max_edges = observation_space["edge_index"].shape[1]
    if not isinstance(action_space, gym.spaces.MultiDiscrete) or action_space.nvec.shape != (max_nodes,):
        raise ValueError(
            f"{who} needs the action space MultiDiscrete([D] * {max_nodes}); got {action_space}."
        )
    return int(max_nodes), int(num_features), int(max_edges), int(action_space.nvec[0])
