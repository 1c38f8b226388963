"""Random layered DAGs as cost graphs, for scale tests and benchmarks."""
from __future__ import annotations

import numpy as np

from hsdag_core.costgraph import CostGraph

__all__ = ["random_cost_graph"]


def random_cost_graph(n: int, devices: int = 2, fan_in: int = 2, window: int = 16,
                      seed: int = 0, boundary_s: float = 5e-4) -> CostGraph:
    """A DAG of ``n`` nodes in topological order, like a deep network's graph.

    Node ``i`` reads the output tensor of up to ``fan_in`` earlier nodes
    chosen among the ``window`` before it (always including ``i-1``), so the
    graph is long and narrow with skip connections. Device ``0`` is a CPU-like
    device; the others are faster by a random factor per node (0.2-2x), so
    placements have real trade-offs. Transfers cost 20 us + bytes at 10 GB/s.
    """
    rng = np.random.default_rng(seed)
    src, dst = [], []
    for i in range(1, n):
        k = min(i, window)
        parents = {i - 1} | set((i - 1 - rng.integers(0, k, size=fan_in - 1)).tolist())
        for p in sorted(parents):
            src.append(p)
            dst.append(i)
    src_a, dst_a = np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64)
    base = rng.lognormal(mean=np.log(1e-4), sigma=1.0, size=n)
    compute = np.empty((n, devices))
    compute[:, 0] = base
    for d in range(1, devices):
        compute[:, d] = base * rng.uniform(0.2, 2.0, size=n)
    lat = np.full((devices, devices), 20e-6)
    bw = np.full((devices, devices), 10e9)
    return CostGraph(
        names=[f"n{i}" for i in range(n)], devices=[f"D{d}" for d in range(devices)],
        compute_s=compute, tensor_src=np.arange(n), tensor_bytes=rng.uniform(1e4, 1e6, size=n),
        edge_src=src_a, edge_dst=dst_a, edge_tensor=src_a, link_latency_s=lat,
        link_bandwidth_Bps=bw, boundary_s=boundary_s,
        mem_bytes=rng.uniform(0, 1e6, size=n), name=f"synthetic{n}")
