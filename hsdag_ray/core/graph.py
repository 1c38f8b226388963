"""Computation graphs of OpenVINO models, coarsening, and placement mapping.

A :class:`CompGraph` holds the *placeable* ops of an ``openvino.Model``:
Parameters, Constants, Results and shape-only ops (ops whose value does not
depend on the input data, and ``ShapeOf``) are never nodes of their own; each
is attached to the node that consumes it (a Result to the node that produces
it). Every node keeps the friendly names of all the ops it stands for
(``Node.ops``), so a placement of nodes expands to an affinity for every op of
the model by name (:meth:`CompGraph.expand_placement`), never by position.

Data edges carry the tensor they move (producer node, output port, shape,
element type, bytes). Nodes carry op type, output shapes and types, an
estimate of FLOPs, bytes read and written, and the bytes of their weights.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping, Optional, Sequence

import numpy as np

from hsdag_ray.core.errors import GraphError
from hsdag_ray.core import op_costs

__all__ = [
    "Node", "Edge", "CompGraph", "GraphError", "from_ov_model", "contract",
    "coarsen_colocation", "coarsen_openvino", "coarsen", "COARSENINGS",
]

#: op types that are never placed on their own
STRUCTURAL = {"Parameter", "Constant", "Result"}
#: ops whose output depends only on the input's shape, never on its values
SHAPE_OPS = {"ShapeOf"}
COARSENINGS = ("none", "colocation", "openvino")




@dataclass
class Node:
    """One placeable unit: a compute op and the ops attached to it.

    Attributes:
        name: the friendly name of the node's main op (unique in the graph).
        op_type: the main op's type (``Convolution``, ``MatMul``...).
        ops: friendly names of every op this node stands for, main op first.
        output_shapes / output_types: of the main op's outputs (for a merged
            node, of its last member's outputs).
        flops: estimated floating-point operations (0 when unknown).
        bytes_read / bytes_written: data read (inputs incl. weights) and written.
        weight_bytes: bytes of the Constants attached to this node.
        members: names of the original nodes merged into this one (coarsening).
    """

    name: str
    op_type: str
    ops: list[str]
    output_shapes: list[list[int]] = field(default_factory=list)
    output_types: list[str] = field(default_factory=list)
    flops: float = 0.0
    bytes_read: float = 0.0
    bytes_written: float = 0.0
    weight_bytes: float = 0.0
    members: list[str] = field(default_factory=list)


@dataclass
class Edge:
    """A tensor produced by node ``src`` (output ``port``) and read by ``dst``."""

    src: int
    dst: int
    port: int
    shape: list[int]
    dtype: str
    bytes: float


@dataclass
class CompGraph:
    """A DAG of placeable nodes, indexed in topological order."""

    name: str
    nodes: list[Node]
    edges: list[Edge]

    def __post_init__(self) -> None:
        self._op_to_node: Optional[dict[str, int]] = None

    # ---------------------------------------------------------------- basics
    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    @property
    def op_to_node(self) -> dict[str, int]:
        """OpenVINO friendly name -> index of the node that holds the op."""
        if self._op_to_node is None:
            self._op_to_node = {op: i for i, n in enumerate(self.nodes) for op in n.ops}
        return self._op_to_node

    def edge_index(self) -> np.ndarray:
        """``[2, m]`` distinct (src, dst) node pairs."""
        if not self.edges:
            return np.zeros((2, 0), dtype=np.int64)
        pairs = np.unique(np.array([(e.src, e.dst) for e in self.edges], dtype=np.int64), axis=0)
        return pairs.T.copy()

    def tensors(self) -> tuple[list[tuple[int, int]], np.ndarray]:
        """Distinct tensors ``(src, port)`` and the tensor index of every edge."""
        ids: dict[tuple[int, int], int] = {}
        of_edge = np.empty(len(self.edges), dtype=np.int64)
        for k, e in enumerate(self.edges):
            of_edge[k] = ids.setdefault((e.src, e.port), len(ids))
        return list(ids), of_edge

    def op_histogram(self) -> Counter:
        return Counter(n.op_type for n in self.nodes)

    def to_networkx(self):
        import networkx as nx

        g = nx.DiGraph()
        g.add_nodes_from(range(self.num_nodes))
        g.add_edges_from((e.src, e.dst) for e in self.edges)
        return g

    # ------------------------------------------------------------ placements
    def expand_placement(self, placement: Mapping[str, str]) -> dict[str, str]:
        """Node placement ``{node name: device}`` -> affinity of every op by name.

        Raises :class:`GraphError` if a node has no device.
        """
        out: dict[str, str] = {}
        for n in self.nodes:
            dev = placement.get(n.name)
            if dev is None:
                raise GraphError(f"the placement has no device for node {n.name!r}")
            for op in n.ops:
                out[op] = dev
        return out

    def placement_from_ops(self, affinity: Mapping[str, str]) -> dict[str, str]:
        """Read a placement keyed by op names (any op of a node) back to nodes.

        Every node must be covered and all of a node's listed ops must agree.
        Raises :class:`GraphError` naming the first op that does not belong to
        this graph, the first node left without a device, or a conflict.
        """
        index = self.op_to_node
        out: dict[str, str] = {}
        for op, dev in affinity.items():
            i = index.get(op)
            if i is None:
                raise GraphError(
                    f"op {op!r} is not in model {self.name!r}: the placement was made for "
                    "another model")
            prev = out.setdefault(self.nodes[i].name, dev)
            if prev != dev:
                raise GraphError(f"ops of node {self.nodes[i].name!r} are placed on both "
                                 f"{prev} and {dev}")
        missing = [n.name for n in self.nodes if n.name not in out]
        if missing:
            raise GraphError(f"the placement has no device for {len(missing)} node(s), "
                             f"e.g. {missing[0]!r}")
        return out

    # ------------------------------------------------------------------ json
    def to_json(self) -> dict:
        return {"name": self.name, "nodes": [asdict(n) for n in self.nodes],
                "edges": [asdict(e) for e in self.edges]}

    @classmethod
    def from_json(cls, data: Mapping) -> "CompGraph":
        try:
            nodes = [Node(**n) for n in data["nodes"]]
            edges = [Edge(**e) for e in data["edges"]]
            return cls(str(data.get("name", "graph")), nodes, edges)
        except (KeyError, TypeError) as e:
            raise GraphError(f"not a graph file written by hsdag_ray.core.graph ({e})") from None

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json()))

    @classmethod
    def load(cls, path: str | Path) -> "CompGraph":
        try:
            return cls.from_json(json.loads(Path(path).read_text()))
        except json.JSONDecodeError as e:
            raise GraphError(f"{path} is not valid JSON ({e.msg} at line {e.lineno})") from None


# ============================================================ from OpenVINO
def from_ov_model(model, name: Optional[str] = None) -> CompGraph:
    """Build the placement graph of an ``openvino.Model`` with static shapes.

    Ops are visited in ``model.get_ordered_ops()`` order (topological); the
    nodes keep that order. A Parameter, Constant, ``ShapeOf`` or any op whose
    inputs are all such data-independent ops is attached to its first
    consumer node (transitively); a Result to the node producing its input.
    """
    ops = list(model.get_ordered_ops())
    if not ops:
        raise GraphError("the model has no ops")
    names = [op.get_friendly_name() for op in ops]
    dup = [k for k, c in Counter(names).items() if c > 1]
    if dup:
        raise GraphError(f"op friendly names must be unique to map a placement; {dup[0]!r} repeats")
    pos = {nm: i for i, nm in enumerate(names)}

    def src_index(inp) -> int:
        return pos[inp.get_source_output().get_node().get_friendly_name()]

    # data_dependent[i]: the op's value depends on the model's input values
    kind = []
    data_dependent = [False] * len(ops)
    for i, op in enumerate(ops):
        t = op.get_type_name()
        ins = [src_index(x) for x in op.inputs()]
        if t == "Parameter":
            data_dependent[i] = True
            kind.append("parameter")
        elif t == "Result":
            kind.append("result")
        elif t == "Constant":
            kind.append("constant")
        elif t in SHAPE_OPS or not any(data_dependent[j] for j in ins):
            kind.append("shape")
        else:
            data_dependent[i] = True
            kind.append("compute")

    node_of: list[int] = [-1] * len(ops)
    nodes: list[Node] = []
    for i, op in enumerate(ops):
        if kind[i] == "compute":
            node_of[i] = len(nodes)
            outs = list(op.outputs())
            nodes.append(Node(
                name=names[i], op_type=op.get_type_name(), ops=[names[i]],
                output_shapes=[op_costs.static_shape(o) for o in outs],
                output_types=[o.get_element_type().get_type_name() for o in outs],
                flops=op_costs.flops(op),
                bytes_read=float(sum(op_costs.tensor_bytes(x.get_source_output()) for x in op.inputs())),
                bytes_written=float(sum(op_costs.tensor_bytes(o) for o in outs)),
                members=[names[i]]))
    if not nodes:
        raise GraphError("the model has no compute op to place")

    # consumers of each op, in topological order
    consumers: list[list[int]] = [[] for _ in ops]
    for i, op in enumerate(ops):
        for x in op.inputs():
            consumers[src_index(x)].append(i)

    # attach non-compute ops: reverse topological order, so a chain of
    # shape ops resolves to the compute op at its end
    for i in range(len(ops) - 1, -1, -1):
        if kind[i] in ("compute", "result"):
            continue
        owners = [node_of[c] for c in consumers[i] if node_of[c] >= 0]
        if owners:
            node_of[i] = min(owners)
    for i, op in enumerate(ops):
        if kind[i] == "result":
            node_of[i] = node_of[src_index(op.input(0))]
    orphan = [names[i] for i in range(len(ops)) if node_of[i] < 0]
    if orphan:
        # e.g. a constant model output, or an unused parameter: give it to the nearest node
        for i in range(len(ops)):
            if node_of[i] < 0:
                node_of[i] = 0 if kind[i] != "result" else len(nodes) - 1
    for i in range(len(ops)):
        if kind[i] != "compute":
            nd = nodes[node_of[i]]
            nd.ops.append(names[i])
            if kind[i] == "constant":
                nd.weight_bytes += op_costs.tensor_bytes(ops[i].output(0))

    edges: list[Edge] = []
    seen: set[tuple[int, int, int]] = set()
    for i, op in enumerate(ops):
        if kind[i] != "compute":
            continue
        for x in op.inputs():
            src_out = x.get_source_output()
            j = src_index(x)
            if kind[j] != "compute":
                continue
            key = (node_of[j], src_out.get_index(), node_of[i])
            if key in seen:
                continue
            seen.add(key)
            edges.append(Edge(src=node_of[j], dst=node_of[i], port=src_out.get_index(),
                              shape=op_costs.static_shape(src_out),
                              dtype=src_out.get_element_type().get_type_name(),
                              bytes=op_costs.tensor_bytes(src_out)))
    return CompGraph(name or model.get_friendly_name(), nodes, edges)


# =============================================================== coarsening
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


def coarsen(graph: CompGraph, how: str, model=None) -> tuple[CompGraph, np.ndarray]:
    """Apply one of :data:`COARSENINGS`; ``none`` returns the graph itself."""
    if how == "none":
        return graph, np.arange(graph.num_nodes)
    if how == "colocation":
        return coarsen_colocation(graph)
    if how == "openvino":
        if model is None:
            raise GraphError("OpenVINO-fusion coarsening needs the model")
        return coarsen_openvino(graph, model)
    raise GraphError(f"unknown coarsening {how!r}; choose one of {', '.join(COARSENINGS)}")


# ============================================================ from a model
def build_graph(model_spec: str, coarsening: str = "none", input_shapes=None):
    """Load a model and build its placement graph.

    Returns ``(model, fine graph, coarse graph, fine node -> coarse node)``.
    """
    from hsdag_ray.core.models import load_model

    model = load_model(model_spec, input_shapes)
    fine = from_ov_model(model, name=Path(model_spec).stem if model_spec.endswith((".xml", ".onnx"))
                         else model_spec)
    coarse, mapping = coarsen(fine, coarsening, model)
    return model, fine, coarse, mapping


def parse_input_shapes(text: Optional[str]):
    """``"1,3,224,224"`` or ``"name:1,128;other:1,128"`` -> shapes for reshape."""
    if not text:
        return None
    try:
        if ":" not in text:
            return [int(d) for d in text.split(",")]
        return {k.strip(): [int(d) for d in v.split(",")]
                for k, v in (part.split(":", 1) for part in text.split(";") if part.strip())}
    except ValueError:
        raise GraphError(f"cannot read input shape {text!r}; write e.g. 1,3,224,224 "
                         "or input_ids:1,128;attention_mask:1,128") from None
