"""Small building blocks the placement networks share."""
from __future__ import annotations

import warnings
from typing import Tuple

import torch
from torch import Tensor, nn
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import to_torch_csr_tensor, to_undirected

__all__ = ["mlp", "normalized_adjacency", "reset_sequential", "unique_ids"]


def mlp(in_dim: int, hidden_dim: int, out_dim: int, num_layers: int) -> nn.Sequential:
    """``num_layers`` linear layers with ReLU between them (none after the last)."""
    dims = [in_dim] + [hidden_dim] * (num_layers - 1) + [out_dim]
    layers: list[nn.Module] = []
    for i in range(num_layers):
        layers.append(nn.Linear(dims[i], dims[i + 1]))
        if i < num_layers - 1:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def reset_sequential(seq: nn.Module) -> None:
    for m in seq.modules():
        if isinstance(m, (nn.Linear, nn.LayerNorm)):
            m.reset_parameters()


def normalized_adjacency(edge_index: Tensor, num_nodes: int, dtype: torch.dtype = torch.float32) -> Tensor:
    r"""``[N, N]`` sparse (CSR) :math:`\hat{D}^{-1/2}(A + A^\top + I)\hat{D}^{-1/2}`, transposed
    as torch-geometric's ``adj_t``: what :class:`~torch_geometric.nn.GCNConv` (with
    ``normalize=True``) multiplies by for ``to_undirected(edge_index)``, built once so
    that several ``GCNConv(normalize=False)`` layers share it (and run as a sparse
    matrix product rather than per-edge messages)."""
    undirected = to_undirected(edge_index, num_nodes=num_nodes)
    index, weight = gcn_norm(undirected, None, num_nodes, add_self_loops=True, dtype=dtype)
    with warnings.catch_warnings():  # torch: "sparse CSR support is in beta"
        warnings.simplefilter("ignore", UserWarning)
        return to_torch_csr_tensor(index.flip(0), weight, size=(num_nodes, num_nodes))


def unique_ids(ids: Tensor) -> Tuple[Tensor, Tensor]:
    """``torch.unique(ids, return_inverse=True)`` for non-negative integer ids, by a
    presence table instead of a sort when the ids are below a few times their count
    (node, edge and group ids are): ``(sorted distinct ids, each id's rank among them)``."""
    if ids.numel() == 0 or int(ids.max()) >= 4 * ids.numel() + 64:
        return torch.unique(ids, return_inverse=True)
    present = torch.zeros(int(ids.max()) + 1, dtype=torch.long, device=ids.device)
    present[ids] = 1
    rank = torch.cumsum(present, 0) - 1
    return present.nonzero().squeeze(1), rank[ids]
