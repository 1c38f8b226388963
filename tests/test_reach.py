"""Ancestors, descendants and parallel nodes of a DAG, exactly, on hand-made graphs."""
import networkx as nx
import numpy as np
import pytest

from hsdag_core.errors import GraphError
from hsdag_core.reach import Reachability, topological_order

# 0 -> 1 -> 3 -> 4 -> 5, 0 -> 2 -> 3, 2 -> 6, and 7 on its own
#
#        1
#      /   \
#    0       3 - 4 - 5
#      \   /
#        2 - 6          7
EDGES = np.array([[0, 0, 1, 2, 3, 4, 2],
                  [1, 2, 3, 3, 4, 5, 6]])
N = 8
ANCESTORS = {0: set(), 1: {0}, 2: {0}, 3: {0, 1, 2}, 4: {0, 1, 2, 3}, 5: {0, 1, 2, 3, 4},
             6: {0, 2}, 7: set()}
DESCENDANTS = {0: {1, 2, 3, 4, 5, 6}, 1: {3, 4, 5}, 2: {3, 4, 5, 6}, 3: {4, 5}, 4: {5},
               5: set(), 6: set(), 7: set()}
PARALLEL = {0: {7}, 1: {2, 6, 7}, 2: {1, 7}, 3: {6, 7}, 4: {6, 7}, 5: {6, 7},
            6: {1, 3, 4, 5, 7}, 7: {0, 1, 2, 3, 4, 5, 6}}


def members(mask: np.ndarray) -> set:
    return set(np.flatnonzero(mask).tolist())


def test_sets_are_exact_on_a_hand_made_dag():
    r = Reachability.of(EDGES, N)
    for v in range(N):
        assert members(r.ancestors(v)) == ANCESTORS[v], v
        assert members(r.descendants(v)) == DESCENDANTS[v], v
        assert members(r.parallel(v)) == PARALLEL[v], v
        # the three sets and the node itself partition the graph
        assert len(ANCESTORS[v]) + len(DESCENDANTS[v]) + len(PARALLEL[v]) + 1 == N


def test_node_numbering_need_not_be_topological():
    # the same DAG with its nodes renumbered backwards (edges now go high -> low)
    perm = np.arange(N)[::-1]
    r = Reachability.of(perm[EDGES], N)
    for v in range(N):
        assert members(r.ancestors(perm[v])) == {int(perm[u]) for u in ANCESTORS[v]}
        assert members(r.descendants(perm[v])) == {int(perm[u]) for u in DESCENDANTS[v]}


def test_matches_networkx_on_a_random_dag_and_packs_bits():
    rng = np.random.default_rng(3)
    n = 300
    src = rng.integers(0, n - 1, 700)
    dst = src + 1 + rng.integers(0, 20, 700)
    keep = dst < n
    edges = np.stack([src[keep], dst[keep]])
    r = Reachability.of(edges, n)
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(edges.T.tolist())
    for v in rng.integers(0, n, 25).tolist():
        assert members(r.ancestors(v)) == nx.ancestors(g, v)
        assert members(r.descendants(v)) == nx.descendants(g, v)
    assert r.desc_bits.shape == (n, (n + 7) // 8) and r.desc_bits.dtype == np.uint8


def test_cycles_and_bad_edges_are_refused():
    with pytest.raises(GraphError, match="cycle"):
        Reachability.of(np.array([[0, 1, 2], [1, 2, 0]]), 3)
    with pytest.raises(GraphError, match="outside"):
        topological_order(np.array([[0], [5]]), 3)
    assert topological_order(EDGES, N).tolist() == [0, 1, 2, 3, 4, 5, 6, 7]
