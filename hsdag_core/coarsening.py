"""Coarsening computation graphs, and a model's placement graph (fine and coarse).

A coarse node stands for a group of fine nodes (:func:`contract`); the
coarsenings of :data:`COARSENINGS` choose the groups: ``colocation`` merges
single-parent/single-child chains, ``openvino`` the ops OpenVINO fuses into one
runtime node. :func:`build_graph` loads a model and returns both graphs with the
fine-to-coarse mapping.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Literal, Sequence, get_args

import numpy as np

from hsdag_core.errors import GraphError
from hsdag_core.compgraph import CompGraph, Edge, Node, from_ov_model

__all__ = ["COARSENINGS", "FUSED", "contract", "coarsen_colocation", "coarsen_openvino", "coarsen",
           "load_openvino", "build_graph"]

#: graph coarsenings before learning
Coarsening = Literal["none", "colocation", "openvino"]
COARSENINGS: tuple[str, ...] = get_args(Coarsening)


def contract(graph: CompGraph, assignment: Sequence[int]) -> tuple[CompGraph, np.ndarray]:
    """Merge the nodes of each group of ``assignment`` (node -> group id).

    Returns the contracted graph and, for every node of ``graph``, the index
    of the node that now holds it. Groups must contract to a DAG (raises
    :class:`GraphError` otherwise). Merged nodes are ordered topologically
    (ties by their first member); a merged node is named after its first
    member, lists all members' ops, and sums FLOPs, bytes and weights. Edges
    inside a group vanish; a tensor read by several members of another group
    becomes one edge. In a merged node, ``Edge.port`` numbers the distinct
    tensors the node sends out.
    """
    import networkx as nx

    a = np.asarray(assignment, dtype=np.int64)
    if a.shape != (graph.num_nodes,):
        raise GraphError("the assignment needs one group per node")
    _, a = np.unique(a, return_inverse=True)
    G = int(a.max()) + 1 if a.size else 0
    first = np.full(G, graph.num_nodes, dtype=np.int64)
    np.minimum.at(first, a, np.arange(graph.num_nodes))
    dag = nx.DiGraph()
    dag.add_nodes_from(range(G))
    dag.add_edges_from((int(a[e.src]), int(a[e.dst])) for e in graph.edges if a[e.src] != a[e.dst])
    try:
        order = list(nx.lexicographical_topological_sort(dag, key=lambda g: int(first[g])))
    except nx.NetworkXUnfeasible:
        raise GraphError("the groups do not contract to a DAG (merging them makes a cycle)") from None
    rank = np.empty(G, dtype=np.int64)
    rank[order] = np.arange(G)
    new_of = rank[a]
    members: list[list[int]] = [[] for _ in range(G)]
    for i in range(graph.num_nodes):
        members[new_of[i]].append(i)
    nodes = []
    for ms in members:
        head, last = graph.nodes[ms[0]], graph.nodes[ms[-1]]
        nodes.append(Node(
            name=head.name, op_type=head.op_type,
            ops=[op for m in ms for op in graph.nodes[m].ops],
            output_shapes=list(last.output_shapes), output_types=list(last.output_types),
            flops=sum(graph.nodes[m].flops for m in ms),
            bytes_read=sum(graph.nodes[m].bytes_read for m in ms),
            bytes_written=sum(graph.nodes[m].bytes_written for m in ms),
            weight_bytes=sum(graph.nodes[m].weight_bytes for m in ms),
            members=[mm for m in ms for mm in graph.nodes[m].members]))
    edges: list[Edge] = []
    seen: set[tuple[int, int, int]] = set()
    port_of: dict[tuple[int, int], int] = {}
    next_port: Counter = Counter()
    for e in graph.edges:
        s, d = int(new_of[e.src]), int(new_of[e.dst])
        if s == d or (e.src, e.port, d) in seen:
            continue
        seen.add((e.src, e.port, d))
        if (e.src, e.port) not in port_of:
            port_of[(e.src, e.port)] = next_port[s]
            next_port[s] += 1
        edges.append(Edge(s, d, port_of[(e.src, e.port)], list(e.shape), e.dtype, e.bytes))
    return CompGraph(graph.name, nodes, edges), new_of


def coarsen_colocation(graph: CompGraph) -> tuple[CompGraph, np.ndarray]:
    """Co-location coarsening: a node whose only parent has it as only child
    joins that parent's group.

    Returns the coarse graph and, per node of ``graph``, its coarse node.
    """
    ei = graph.edge_index()
    indeg = np.bincount(ei[1], minlength=graph.num_nodes)
    outdeg = np.bincount(ei[0], minlength=graph.num_nodes)
    parent = np.full(graph.num_nodes, -1, dtype=np.int64)
    parent[ei[1]] = ei[0]
    group = np.arange(graph.num_nodes)
    for v in range(graph.num_nodes):  # topological order: the parent's group is final
        u = parent[v]
        if indeg[v] == 1 and outdeg[u] == 1:
            group[v] = group[u]
    return contract(graph, group)


def coarsen_openvino(graph: CompGraph, model, device: str = "CPU") -> tuple[CompGraph, np.ndarray]:
    """Group the nodes OpenVINO fuses into one runtime node.

    Compiles ``model`` on ``device`` and reads each runtime node's
    ``originalLayersNames``; nodes named together are merged (transitively).
    Returns the coarse graph and, per node of ``graph``, its coarse node.
    """
    import openvino as ov
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    compiled = ov.Core().compile_model(model, device)
    index = graph.op_to_node
    rows, cols = [], []
    for rn in compiled.get_runtime_model().get_ops():
        info = rn.get_rt_info()
        if "originalLayersNames" not in info:
            continue
        names = [s for s in str(info["originalLayersNames"].astype(str)).split(",") if s]
        idx = sorted({index[s] for s in names if s in index})
        rows += idx[:-1]
        cols += idx[1:]
    n = graph.num_nodes
    adj = coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n))
    _, labels = connected_components(adj, directed=False)
    try:
        return contract(graph, labels)
    except GraphError:
        # a fused group that is not convex in our graph cannot be one stage
        raise GraphError("OpenVINO's fused groups do not contract to a DAG for this model; "
                         "use --coarsen colocation") from None


#: the coarsening that groups the ops the graph source fuses into one runtime node
FUSED = COARSENINGS[2]


def coarsen(graph: CompGraph, how: str, fuse=None) -> tuple[CompGraph, np.ndarray]:
    """Apply one of :data:`COARSENINGS`; ``none`` returns the graph itself. ``fuse(graph)``:
    the graph source's own groups (:data:`FUSED`), None where the source fuses nothing."""
    if how == "none":
        return graph, np.arange(graph.num_nodes)
    if how == "colocation":
        return coarsen_colocation(graph)
    if how == FUSED:
        if fuse is None:
            raise GraphError(f"--coarsen {FUSED} groups the ops OpenVINO fuses; this graph has "
                             "none, use --coarsen colocation or none")
        return fuse(graph)
    raise GraphError(f"unknown coarsening {how!r}; choose one of {', '.join(COARSENINGS)}")


def load_openvino(model_spec: str, input_shapes=None):
    """``(openvino.Model, fine graph, fuse)`` of ``model_spec``: the OpenVINO graph
    (:mod:`hsdag_core.models`), whose fused groups :func:`coarsen_openvino` finds."""
    from hsdag_core.models import load_model

    model = load_model(model_spec, input_shapes)
    fine = from_ov_model(model, name=Path(model_spec).stem if model_spec.endswith((".xml", ".onnx"))
                         else model_spec)
    return model, fine, lambda graph: coarsen_openvino(graph, model)


def build_graph(model_spec: str, coarsening: str = "none", input_shapes=None, load=None):
    """Load a model and build its placement graph.

    ``load(model_spec, input_shapes)`` gives ``(model, fine graph, fuse)``: the graph
    source's loader (:meth:`envs.source.GraphSource.load`); by default
    :func:`load_openvino`. A DOPPLER compute graph is its own graph whatever the source.
    Returns ``(model, fine graph, coarse graph, fine node -> coarse node)``.
    """
    from hsdag_core.doppler import doppler_model, is_doppler_spec

    if is_doppler_spec(model_spec):  # DOPPLER's ops are the nodes: nothing to coarsen
        try:
            _, graph = doppler_model(model_spec)
        except ValueError as e:
            raise GraphError(str(e)) from None
        return None, graph, graph, np.arange(graph.num_nodes)
    model, fine, fuse = (load or load_openvino)(model_spec, input_shapes)
    coarse, mapping = coarsen(fine, coarsening, fuse)
    return model, fine, coarse, mapping
