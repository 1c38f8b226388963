"""Computation graphs of OpenVINO models and placement mapping.

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
Grouping nodes into coarser ones is :mod:`hsdag_core.coarsening`'s.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping, Optional

import numpy as np

from hsdag_core.errors import GraphError
from hsdag_core import op_costs

__all__ = [
    "Node", "Edge", "CompGraph", "GraphError", "from_ov_model", "parse_input_shapes",
]

#: op types that are never placed on their own
STRUCTURAL = {"Parameter", "Constant", "Result"}
#: ops whose output depends only on the input's shape, never on its values
SHAPE_OPS = {"ShapeOf"}




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
            raise GraphError(f"not a graph file written by hsdag_core.compgraph ({e})") from None

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
