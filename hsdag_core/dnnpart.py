"""Load the public dnn-partitioning benchmark (Tarnawski et al., NeurIPS 2020) as cost graphs.

The benchmark (``shared/benchmarks/dnn-partitioning/``, MIT licensed) gives one JSON
file per workload::

    {"maxSizePerFPGA": bytes, "maxFPGAs": k, "maxCPUs": l,
     "nodes": [{"id", "name"?, "supportedOnFpga", "cpuLatency", "fpgaLatency",
                "isBackwardNode", "colorClass"?, "size"}, ...],
     "edges": [{"sourceId", "destId", "cost", "size"?}, ...]}

and human-expert splits (``human-experts/*.json``)::

    {"cpus": [{"load", "nodes": [id, ...]}], "fpgas": [{"load", "nodes": [...]}, ...]}

Mapping onto :class:`~hsdag_core.costgraph.CostGraph`:

* devices are ``CPU0..CPU{l-1}`` then ``ACC0..ACC{k-1}`` (the paper's "FPGA" is any
  accelerator; the layer graphs were in fact profiled on GPUs). ``max_cpus`` /
  ``max_accs`` cap the counts.
* ``compute_s[i, CPUj] = cpuLatency_i``, ``compute_s[i, ACCj] = fpgaLatency_i``
  (``inf`` when ``supportedOnFpga`` is false).
* ``mem_bytes = size`` against ``maxSizePerFPGA`` on every accelerator (CPUs
  unlimited), as in the paper.
* One tensor per source node: the README says ``cost`` is "the time it takes to
  transfer the output of node ``sourceId``" and must be the same on all of a
  node's out-edges. Should a file break that rule, one tensor is made per
  distinct ``(source, cost)`` pair, so every edge keeps its own cost.
  ``tensor_transfer_s`` holds that time (it does not depend on the pair of
  devices); ``tensor_bytes`` holds the edges' ``size`` when given, else 0.
* ``colorClass`` becomes ``colocate`` (nodes without one are unconstrained);
  ``isBackwardNode`` becomes ``is_backward``.
* Nodes are put in a topological order (networkx, ties broken by file order);
  each node's name is ``"<id>:<name>"`` (or ``"<id>"``) so ids survive the
  reordering (:func:`node_ids` reads them back).

Units: every time in these files is in **milliseconds** (the paper reports
time-per-sample in ms; in the latency folder and in all operator graphs an
edge's ``cost`` is its ``size`` over 2**31 B/s expressed in ms). The loader
converts every time to **seconds** (x 1e-3) and changes nothing else, so loads
compare with the paper's after x 1000. Note the throughput folder's *layer*
graphs: their edge costs are 1000x smaller than those of the same models in the
latency folder (``size / cost`` is 2**31 instead of 2**31 / 1000); we keep them
as given, which is what the paper's numbers for those inputs used.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping, Optional

import networkx as nx
import numpy as np

from hsdag_core.costgraph import CostGraph

__all__ = ["MS", "load_dnnpart", "dnnpart_from_dict", "load_expert_split", "split_accelerators",
           "expert_split_from_dict", "node_ids"]

MS = 1e-3
"""Seconds per unit of time in the benchmark files (milliseconds)."""


def _field(obj: Mapping[str, Any], key: str, what: str, kind: type | tuple = (int, float)) -> Any:
    if not isinstance(obj, Mapping) or key not in obj:
        raise ValueError(f"{what} has no {key!r} field; the dnn-partitioning format requires it")
    val = obj[key]
    if isinstance(val, bool) and kind in ((int, float), float):
        raise ValueError(f"{what}: {key!r} must be a number, not {val!r}")
    if not isinstance(val, kind):
        raise ValueError(f"{what}: {key!r} must be {getattr(kind, '__name__', 'a number')}, "
                         f"not {val!r}")
    if isinstance(val, float) and math.isnan(val):
        raise ValueError(f"{what}: {key!r} is NaN")
    return val


def _flag(obj: Mapping[str, Any], key: str, what: str, default: Optional[bool] = None) -> bool:
    if key not in obj and default is not None:
        return default
    val = _field(obj, key, what, (bool, int))
    if val not in (0, 1, True, False):
        raise ValueError(f"{what}: {key!r} must be true/false or 0/1, not {val!r}")
    return bool(val)


def dnnpart_from_dict(data: Mapping[str, Any], *, max_cpus: Optional[int] = None,
                      max_accs: Optional[int] = None, extra_accs: int = 0,
                      name: str = "dnnpart") -> CostGraph:
    """Build a :class:`CostGraph` from a parsed benchmark JSON object.

    Args:
        data: the parsed file.
        max_cpus, max_accs: cap the number of CPU cores / accelerators (the
            file's ``maxCPUs`` / ``maxFPGAs`` when None or larger).
        extra_accs: accelerators added beyond the file's ``maxFPGAs`` (to score a
            split that uses more than the input allows).
        name: label of the graph.

    Raises:
        ValueError: one sentence on the first problem found (missing or
            mistyped field, unknown node id, duplicate id, cycle, no device).
    """
    if not isinstance(data, Mapping):
        raise ValueError("a dnn-partitioning input must be a JSON object with "
                         "maxSizePerFPGA, maxFPGAs, maxCPUs, nodes and edges")
    cap = float(_field(data, "maxSizePerFPGA", "the input"))
    n_acc = _field(data, "maxFPGAs", "the input", int)
    n_cpu = _field(data, "maxCPUs", "the input", int)
    if n_acc < 0 or n_cpu < 0:
        raise ValueError("maxFPGAs and maxCPUs must be non-negative")
    if max_cpus is not None:
        n_cpu = min(n_cpu, int(max_cpus))
    if max_accs is not None:
        n_acc = min(n_acc, int(max_accs))
    n_acc += max(int(extra_accs), 0)
    if n_cpu + n_acc == 0:
        raise ValueError("no device left: the input (or the cap) gives 0 CPUs and 0 accelerators")
    nodes = data.get("nodes")
    edges = data.get("edges")
    if not isinstance(nodes, list) or not nodes:
        raise ValueError("the input's 'nodes' must be a non-empty list")
    if not isinstance(edges, list):
        raise ValueError("the input's 'edges' must be a list")

    pos: dict[int, int] = {}
    for k, nd in enumerate(nodes):
        nid = _field(nd, "id", f"node #{k}", int)
        if nid in pos:
            raise ValueError(f"node id {nid} appears twice in the input")
        pos[nid] = k
    dag = nx.DiGraph()
    dag.add_nodes_from(pos)
    out_costs: dict[int, dict[float, int]] = {}   # source id -> cost -> tensor index
    edge_list: list[tuple[int, int, float, float]] = []
    seen: set[tuple[int, int]] = set()
    for k, e in enumerate(edges):
        what = f"edge #{k}"
        u = _field(e, "sourceId", what, int)
        v = _field(e, "destId", what, int)
        c = float(_field(e, "cost", what))
        size = float(e.get("size", 0.0)) if isinstance(e, Mapping) else 0.0
        for x in (u, v):
            if x not in pos:
                raise ValueError(f"{what} refers to node id {x}, which is not among the nodes")
        if u == v:
            raise ValueError(f"{what} is a self-loop on node {u}; the graph must be a DAG")
        if c < 0:
            raise ValueError(f"{what} has a negative cost {c}")
        if (u, v) in seen:
            continue
        seen.add((u, v))
        dag.add_edge(u, v)
        edge_list.append((u, v, c, size))
    try:
        order = list(nx.lexicographical_topological_sort(dag, key=lambda x: pos[x]))
    except nx.NetworkXUnfeasible:
        cyc = nx.find_cycle(dag)
        raise ValueError(f"the input graph has a cycle through node ids "
                         f"{[a for a, _ in cyc]}; it must be a DAG") from None
    index = {nid: i for i, nid in enumerate(order)}

    n = len(order)
    devices = [f"CPU{j}" for j in range(n_cpu)] + [f"ACC{j}" for j in range(n_acc)]
    compute = np.empty((n, len(devices)))
    mem = np.empty(n)
    colocate = np.full(n, -1, dtype=np.int64)
    backward = np.zeros(n, dtype=bool)
    names: list[str] = []
    classes: dict[Any, int] = {}
    for nid in order:
        nd = nodes[pos[nid]]
        i = index[nid]
        what = f"node {nid}"
        cpu = float(_field(nd, "cpuLatency", what))
        acc = float(_field(nd, "fpgaLatency", what))
        if cpu < 0 or acc < 0:
            raise ValueError(f"{what} has a negative latency")
        on_acc = _flag(nd, "supportedOnFpga", what)
        compute[i, :n_cpu] = cpu * MS
        compute[i, n_cpu:] = acc * MS if on_acc else np.inf
        mem[i] = float(_field(nd, "size", what)) if "size" in nd else 0.0
        backward[i] = _flag(nd, "isBackwardNode", what, default=False)
        if nd.get("colorClass") is not None:
            cc = _field(nd, "colorClass", what, int)
            colocate[i] = classes.setdefault(cc, len(classes))
        label = nd.get("name")
        names.append(f"{nid}:{label}" if label not in (None, "") else str(nid))

    tensor_src: list[int] = []
    tensor_ms: list[float] = []
    tensor_bytes: list[float] = []
    edge_src, edge_dst, edge_tensor = [], [], []
    for u, v, c, size in sorted(edge_list, key=lambda e: (index[e[0]], index[e[1]])):
        per_cost = out_costs.setdefault(u, {})
        if c not in per_cost:
            per_cost[c] = len(tensor_src)
            tensor_src.append(index[u])
            tensor_ms.append(c)
            tensor_bytes.append(size)
        edge_src.append(index[u])
        edge_dst.append(index[v])
        edge_tensor.append(per_cost[c])

    mem_capacity = np.array([np.inf] * n_cpu + [cap] * n_acc)
    return CostGraph(
        names=names, devices=devices, compute_s=compute,
        tensor_src=np.array(tensor_src, dtype=np.int64),
        tensor_bytes=np.array(tensor_bytes),
        edge_src=np.array(edge_src, dtype=np.int64), edge_dst=np.array(edge_dst, dtype=np.int64),
        edge_tensor=np.array(edge_tensor, dtype=np.int64),
        tensor_transfer_s=np.array(tensor_ms) * MS,
        mem_bytes=mem, mem_capacity=mem_capacity,
        colocate=colocate if (colocate >= 0).any() else None,
        is_backward=backward if backward.any() else None,
        modeled={d: False for d in devices}, name=name)


def _read_json(path: str | Path, what: str) -> Any:
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{what} {str(p)!r} does not exist or is not a file")
    try:
        with p.open() as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{what} {str(p)!r} is not valid JSON ({e.msg} at line {e.lineno})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{what} {str(p)!r} is not a UTF-8 text file") from None


def load_dnnpart(path: str | Path, *, max_cpus: Optional[int] = None,
                 max_accs: Optional[int] = None, extra_accs: int = 0) -> CostGraph:
    """Load a benchmark input file (see the module docstring for the mapping).

    The graph's name is the file's stem, prefixed by its folder names when it
    lies in the benchmark tree (e.g. ``throughput/OperatorGraphs/bert_l-3_inference``).
    """
    p = Path(path)
    data = _read_json(p, "the dnn-partitioning input")
    parts = p.parts
    label = p.stem
    if len(parts) >= 3 and parts[-3].endswith("-inputs"):
        label = f"{parts[-3].removesuffix('-inputs')}/{parts[-2]}/{p.stem}"
    try:
        return dnnpart_from_dict(data, max_cpus=max_cpus, max_accs=max_accs,
                                 extra_accs=extra_accs, name=label)
    except ValueError as e:
        raise ValueError(f"{p}: {e}") from None


def node_ids(graph: CostGraph) -> np.ndarray:
    """``[n]`` benchmark node id of each node of a graph made by this module."""
    try:
        return np.array([int(nm.split(":", 1)[0]) for nm in graph.names], dtype=np.int64)
    except ValueError:
        raise ValueError(f"graph {graph.name!r} was not loaded from the dnn-partitioning "
                         "format (its node names do not start with an id)") from None


def split_accelerators(data: Mapping[str, Any]) -> int:
    """How many accelerators a split ``{"cpus": [...], "fpgas": [...]}`` needs: one past its
    last ``fpgas`` entry that holds nodes (``ACC0`` .. ``ACC{n-1}``)."""
    return max((j + 1 for j, f in enumerate(data.get("fpgas") or [])
                if isinstance(f, Mapping) and f.get("nodes")), default=0)


def expert_split_from_dict(data: Mapping[str, Any], graph: CostGraph) -> np.ndarray:
    """Map a split ``{"cpus": [...], "fpgas": [...]}`` onto ``graph``'s devices.

    ``cpus[j]`` goes to ``CPUj`` and ``fpgas[j]`` to ``ACCj``. Nodes the split
    leaves out (the backward nodes when a forward-only split is applied to a
    training graph) take the device of their co-location class, as the
    paper's code does.

    Raises:
        ValueError: unknown node id, a node placed twice, more devices than the
            graph has, or a missing node whose device cannot be inferred.
    """
    if not isinstance(data, Mapping) or not isinstance(data.get("fpgas"), list) \
            or not isinstance(data.get("cpus", []), list):
        raise ValueError("a split must be a JSON object with lists 'cpus' and 'fpgas' of "
                         "{'nodes': [ids]} entries")
    ids = node_ids(graph)
    where = {int(x): i for i, x in enumerate(ids)}
    p = np.full(graph.num_nodes, -1, dtype=np.int64)
    for kind, prefix in (("cpus", "CPU"), ("fpgas", "ACC")):
        for j, machine in enumerate(data.get(kind, [])):
            members = machine.get("nodes", []) if isinstance(machine, Mapping) else None
            if not isinstance(members, list):
                raise ValueError(f"{kind}[{j}] has no list of 'nodes'")
            if not members:
                continue
            dev = f"{prefix}{j}"
            if dev not in graph.devices:
                raise ValueError(f"the split uses {dev} but the graph has only {graph.devices}; "
                                 "load the graph with more devices")
            d = graph.devices.index(dev)
            for nid in members:
                if not isinstance(nid, int) or nid not in where:
                    raise ValueError(f"the split places node id {nid!r}, which is not in the graph")
                if p[where[nid]] >= 0:
                    raise ValueError(f"the split places node id {nid} twice")
                p[where[nid]] = d
    missing = np.flatnonzero(p < 0)
    if missing.size and graph.colocate is not None:
        for i in missing:
            cls = graph.colocate[i]
            if cls < 0:
                continue
            placed = np.unique(p[(graph.colocate == cls) & (p >= 0)])
            if placed.size == 1:
                p[i] = placed[0]
    missing = np.flatnonzero(p < 0)
    if missing.size:
        raise ValueError(f"the split gives no device to node id {ids[missing[0]]} "
                         f"({missing.size} node(s) unplaced) and none can be inferred "
                         "from its co-location class")
    return p


def load_expert_split(path: str | Path, graph: CostGraph) -> np.ndarray:
    """Load a human-expert split file as a placement of ``graph`` (device index per node)."""
    data = _read_json(path, "the split file")
    try:
        return expert_split_from_dict(data, graph)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
