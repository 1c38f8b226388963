"""Pictures of a run: the learning curve and the placed graph."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from hsdag_core.compgraph import CompGraph  # noqa: E402

__all__ = ["learning_curve", "placed_graph"]


def learning_curve(latencies_s: Sequence[float], path: str | Path, baselines: Mapping[str, float],
                   title: str = "") -> None:
    """Latency of every measured placement and the best so far, with baselines."""
    y = np.asarray(latencies_s, dtype=np.float64) * 1e3
    x = np.arange(1, len(y) + 1)
    fig, ax = plt.subplots(figsize=(7, 4))
    ok = np.isfinite(y)
    ax.scatter(x[ok], y[ok], s=6, alpha=0.35, label="measured placements")
    if ok.any():
        best = np.minimum.accumulate(np.where(ok, y, np.inf))
        ax.plot(x, np.where(np.isfinite(best), best, np.nan), color="C3", lw=2, label="best so far")
    for k, (name, v) in enumerate(sorted(baselines.items(), key=lambda kv: kv[1])):
        if v is not None and np.isfinite(v):
            ax.axhline(v * 1e3, ls="--", lw=1, color=f"C{(k + 4) % 10}", label=name)
    ax.set_xlabel("placements measured")
    ax.set_ylabel("latency (ms)")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def placed_graph(graph: CompGraph, placement: Mapping[str, str], devices: Sequence[str],
                 path: str | Path, title: str = "", max_labels: int = 60) -> None:
    """The graph drawn in topological layers, each node coloured by its device."""
    import networkx as nx

    g = graph.to_networkx()
    for layer, nodes in enumerate(nx.topological_generations(g)):
        for v in nodes:
            g.nodes[v]["layer"] = layer
    pos = nx.multipartite_layout(g, subset_key="layer")  # layers left to right
    colour = {d: f"C{k}" for k, d in enumerate(devices)}
    n = graph.num_nodes
    fig, ax = plt.subplots(figsize=(min(30, 4 + n * 0.08), 5))
    nx.draw_networkx_edges(g, pos, ax=ax, width=0.5, alpha=0.4, arrows=False)
    nx.draw_networkx_nodes(g, pos, ax=ax, node_size=40 if n > 100 else 120,
                           node_color=[colour[placement[graph.nodes[v].name]] for v in g.nodes])
    if n <= max_labels:
        nx.draw_networkx_labels(g, pos, ax=ax, font_size=5,
                                labels={v: graph.nodes[v].op_type[:6] for v in g.nodes})
    for d in devices:
        ax.scatter([], [], color=colour[d], label=d)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(title)
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
