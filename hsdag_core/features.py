"""Node features of the HSDAG paper, as a torch-geometric ``Data``.

Feature groups (each can be switched off for the paper's ablation):

``op_type``
    one-hot of the op type over :data:`OP_VOCAB` (last slot: any other type).
``shape``
    the first output's shape, last :data:`SHAPE_DIMS` dims right-aligned,
    as ``log2(1 + d) / 16``.
``degree``
    one-hots of in- and out-degree, capped at :data:`MAX_DEGREE`.
``fractal``
    per-node fractal dimension: the least-squares slope of ``log N(v, r)``
    against ``log r`` for ``r = 1..R``, ``N(v, r)`` the number of nodes within
    undirected shortest-path distance ``r`` of ``v``.
``position``
    topological position: ``"id"`` (index / n) or ``"sin"`` (sinusoidal
    encoding of the index, :data:`POS_DIMS` dims) or ``"none"``.
``cost``
    ``log1p`` of FLOPs (in MFLOP), of bytes read and written (in MB) and of
    weight bytes, and, when a per-node time per device is given, ``log1p`` of
    each device's time in ms.
``relative`` (off by default; needs per-node times)
    the same costs made free of the graph's scale, so that one policy reads
    graphs whose latencies differ by orders of magnitude alike: per device,
    ``log1p`` of the node's time over the graph's mean node time on that
    device; per device after the first, the log of the node's time there over
    its time on the first (which device is faster for this node); and, per
    device with a memory limit, the node's memory and the whole graph's memory
    as fractions of that device's capacity (capped at
    :data:`MAX_MEMORY_FRACTION`), which say how much of the graph may go there.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import scipy.sparse as sp

from hsdag_core.compgraph import CompGraph

__all__ = ["FeatureConfig", "OP_VOCAB", "node_features", "relative_features", "MAX_MEMORY_FRACTION", "fractal_dimension", "to_data"]

OP_VOCAB = (
    "Convolution", "GroupConvolution", "MatMul", "Add", "Multiply", "Subtract", "Divide",
    "Relu", "Sigmoid", "Tanh", "Gelu", "Swish", "HSwish", "Clamp", "Exp", "Sqrt", "Power",
    "MaxPool", "AvgPool", "ReduceMean", "ReduceSum", "ReduceMax", "MVN", "Softmax",
    "BatchNormInference", "Concat", "Split", "VariadicSplit", "Reshape", "Transpose",
    "Squeeze", "Unsqueeze", "Gather", "StridedSlice", "Slice", "Broadcast", "Interpolate",
    "ScaledDotProductAttention", "Convert", "Select", "Pad",
)
SHAPE_DIMS = 4
#: memory fractions of the ``relative`` group are capped here
MAX_MEMORY_FRACTION = 4.0
MAX_DEGREE = 8
POS_DIMS = 8
FRACTAL_RADII = 6


@dataclass(frozen=True)
class FeatureConfig:
    """Which node-feature groups to build (the paper's ablation switches).

    Attributes:
        op_type: op-type one-hot.
        shape: output shape.
        degree: in- and out-degree one-hots.
        fractal: per-node fractal dimension (graph-structural feature).
        position: ``"id"``, ``"sin"`` or ``"none"`` (node ids / topological position).
        cost: FLOPs, bytes and profiled times when known.
        relative: scale-free costs (needs per-node times; see the module docstring).
    """

    op_type: bool = True
    shape: bool = True
    degree: bool = True
    fractal: bool = True
    position: str = "id"
    cost: bool = True
    relative: bool = False

    def __post_init__(self) -> None:
        if self.position not in ("id", "sin", "none"):
            raise ValueError(f"position must be 'id', 'sin' or 'none', not {self.position!r}")


def fractal_dimension(edge_index: np.ndarray, n: int, radii: int = FRACTAL_RADII,
                      chunk: int = 2048) -> np.ndarray:
    """``[n]`` slope of ``log N(v, r)`` vs ``log r``, ``r = 1..radii``.

    Breadth-first growth of every node's ball on the undirected graph, done
    for ``chunk`` sources at a time with sparse products so memory stays
    bounded on graphs of tens of thousands of nodes. A node whose ball stops
    growing early still gets the slope over all radii (its N stays flat).
    """
    if n == 0:
        return np.zeros(0)
    src, dst = edge_index
    A = sp.coo_matrix((np.ones(len(src) * 2, dtype=np.float32),
                       (np.concatenate([src, dst]), np.concatenate([dst, src]))),
                      shape=(n, n)).tocsr()
    A.data[:] = 1.0
    A = (A + sp.identity(n, dtype=np.float32, format="csr")).tocsr()
    A.data[:] = 1.0
    counts = np.zeros((n, radii))
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        reach = sp.identity(n, dtype=np.float32, format="csr")[lo:hi]
        for r in range(radii):
            reach = reach @ A
            reach.data[:] = 1.0
            counts[lo:hi, r] = np.asarray(reach.sum(axis=1)).ravel()
    logr = np.log(np.arange(1, radii + 1))
    logn = np.log(counts)
    x = logr - logr.mean()
    return (logn - logn.mean(axis=1, keepdims=True)) @ x / (x @ x)


def _sinusoidal(pos: np.ndarray, dims: int) -> np.ndarray:
    freqs = 1.0 / (10000 ** (np.arange(dims // 2) * 2.0 / dims))
    ang = pos[:, None] * freqs[None]
    return np.concatenate([np.sin(ang), np.cos(ang)], axis=1)


def node_features(graph: CompGraph, config: FeatureConfig = FeatureConfig(),
                  times_s: Optional[np.ndarray] = None, mem_bytes: Optional[np.ndarray] = None,
                  mem_capacity: Optional[np.ndarray] = None) -> tuple[np.ndarray, list[str]]:
    """``[n, F]`` float32 feature matrix and the name of every column.

    ``times_s`` (``[n, D]`` seconds) adds profiled per-device times to the
    cost group, and the ``relative`` group; ``mem_bytes`` (``[n]``) and
    ``mem_capacity`` (``[D]``, ``inf`` = unlimited) add its memory fractions.
    """
    n = graph.num_nodes
    ei = graph.edge_index()
    cols: list[np.ndarray] = []
    names: list[str] = []
    if config.op_type:
        oh = np.zeros((n, len(OP_VOCAB) + 1), dtype=np.float32)
        index = {t: k for k, t in enumerate(OP_VOCAB)}
        for i, node in enumerate(graph.nodes):
            oh[i, index.get(node.op_type, len(OP_VOCAB))] = 1
        cols.append(oh)
        names += [f"op={t}" for t in OP_VOCAB] + ["op=other"]
    if config.shape:
        sh = np.zeros((n, SHAPE_DIMS), dtype=np.float32)
        for i, node in enumerate(graph.nodes):
            s = node.output_shapes[0][-SHAPE_DIMS:] if node.output_shapes else []
            if s:
                sh[i, SHAPE_DIMS - len(s):] = np.log2(1.0 + np.asarray(s, dtype=np.float64)) / 16
        cols.append(sh)
        names += [f"shape[{k}]" for k in range(SHAPE_DIMS)]
    if config.degree:
        for which, row in (("in", 1), ("out", 0)):
            deg = np.minimum(np.bincount(ei[row], minlength=n), MAX_DEGREE)
            oh = np.zeros((n, MAX_DEGREE + 1), dtype=np.float32)
            oh[np.arange(n), deg] = 1
            cols.append(oh)
            names += [f"{which}deg={k}" for k in range(MAX_DEGREE)] + [f"{which}deg>={MAX_DEGREE}"]
    if config.fractal:
        cols.append(fractal_dimension(ei, n)[:, None].astype(np.float32))
        names.append("fractal_dim")
    if config.position == "id":
        cols.append((np.arange(n, dtype=np.float32) / max(n - 1, 1))[:, None])
        names.append("topo_pos")
    elif config.position == "sin":
        cols.append(_sinusoidal(np.arange(n, dtype=np.float64), POS_DIMS).astype(np.float32))
        names += [f"topo_sin[{k}]" for k in range(POS_DIMS)]
    if config.cost:
        c = np.array([[node.flops / 1e6, node.bytes_read / 1e6, node.bytes_written / 1e6,
                       node.weight_bytes / 1e6] for node in graph.nodes], dtype=np.float64)
        cols.append(np.log1p(c).astype(np.float32))
        names += ["log_mflops", "log_mb_read", "log_mb_written", "log_mb_weights"]
        if times_s is not None:
            t = np.asarray(times_s, dtype=np.float64).reshape(n, -1)
            t = np.where(np.isfinite(t), t, 1e3)
            cols.append(np.log1p(t * 1e3).astype(np.float32))
            names += [f"log_ms_dev{k}" for k in range(t.shape[1])]
    if config.relative and times_s is not None:
        rel, rel_names = relative_features(times_s, mem_bytes, mem_capacity)
        cols.append(rel)
        names += rel_names
    if not cols:
        raise ValueError("every feature group is switched off; keep at least one")
    return np.concatenate(cols, axis=1), names


def relative_features(times_s: np.ndarray, mem_bytes: Optional[np.ndarray] = None,
                      mem_capacity: Optional[np.ndarray] = None) -> tuple[np.ndarray, list[str]]:
    """The ``relative`` group (see the module docstring): ``[n, F]`` and the column names."""
    t = np.asarray(times_s, dtype=np.float64)
    n = t.shape[0]
    t = t.reshape(n, -1)
    t = np.where(np.isfinite(t), t, np.nan)
    mean = np.nanmean(t, axis=0) if n else np.ones(t.shape[1])
    mean = np.where(np.isfinite(mean) & (mean > 0), mean, 1.0)
    share = np.log1p(np.nan_to_num(t / mean, nan=1e3))
    cols, names = [share], [f"rel_time_dev{k}" for k in range(t.shape[1])]
    if t.shape[1] > 1:
        tiny = 1e-12
        ratio = np.log((t[:, 1:] + tiny) / (t[:, :1] + tiny))
        cols.append(np.clip(np.nan_to_num(ratio, nan=0.0), -10.0, 10.0))
        names += [f"log_speed_dev{k}_vs_dev0" for k in range(1, t.shape[1])]
    if mem_bytes is not None and mem_capacity is not None:
        mem = np.asarray(mem_bytes, dtype=np.float64).reshape(n)
        for k, cap in enumerate(np.asarray(mem_capacity, dtype=np.float64).reshape(-1)):
            if np.isfinite(cap) and cap > 0:
                cols.append(np.minimum(mem / cap, MAX_MEMORY_FRACTION)[:, None])
                cols.append(np.full((n, 1), min(mem.sum() / cap, MAX_MEMORY_FRACTION)))
                names += [f"mem_of_dev{k}", f"graph_mem_of_dev{k}"]
    return np.concatenate(cols, axis=1).astype(np.float32), names


def to_data(graph: CompGraph, config: FeatureConfig = FeatureConfig(),
            times_s: Optional[np.ndarray] = None):
    """The graph as a torch-geometric ``Data``: ``x``, ``edge_index`` (directed,
    producer -> consumer), ``names`` (node names, for mapping back) and
    ``feature_names``."""
    import torch
    from torch_geometric.data import Data

    x, cols = node_features(graph, config, times_s)
    return Data(x=torch.from_numpy(x), edge_index=torch.from_numpy(graph.edge_index()),
                num_nodes=graph.num_nodes, names=graph.names, feature_names=cols)
