"""Load DOPPLER's compute graphs (Yao et al., ICLR 2026; ``compute_graph/*.txt``) as cost graphs.

The format (plain text)::

    line 1   the number of ids: input ids plus op nodes
    line 2   the input ids (comma-separated; not placed)
    line 3   edge sources (op node ids, 0-based, comma-separated)
    line 4   edge destinations
    then     one line per op node: ``comp,comm[,kind]`` (integers, and an optional kind name)

Mapping onto :class:`~hsdag_core.costgraph.CostGraph`, as DOPPLER's own simulator
(``env/cost.py`` of the repository xinyuyao/Doppler) reads it:

* the op nodes are the nodes, named by their DOPPLER id (``"0"``, ``"1"``...) and kept in
  id order (the files list every edge from a lower to a higher id; a file that does not
  is refused);
* devices are ``GPU0..GPU{k-1}``, identical: ``k`` is 4, 8 for a file named ``8gpu_*``
  (``devices=`` overrides it); ``compute_s[i, d] = comp_i * TICK_S`` on every device;
* one tensor per node, sent in ``comm_i * TICK_S`` to any other device, once per
  destination device (DOPPLER pays ``comm[src]`` per edge whose ends are on different
  devices; its links have no contention, so the arrival times are the same);
* no memory limits; the kind, when given, becomes the node's op type;
* :attr:`~hsdag_core.costgraph.CostGraph.event_order` is ``"doppler"`` and
  :attr:`~hsdag_core.costgraph.CostGraph.time_tick_s` is :data:`TICK_S`: the ``parallel``
  objective then counts time in whole ticks and serves ops that are ready at the same time
  in the order DOPPLER's simpy simulator does (:mod:`envs.simulator`).

Times: DOPPLER's simulator divides its times by 1e10, so one unit of the file is
:data:`TICK_S` = 1e-10 s here and the simulator's values equal DOPPLER's.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import numpy as np

from hsdag_core.costgraph import CostGraph

__all__ = ["TICK_S", "DopplerGraph", "read_doppler", "load_doppler", "doppler_compgraph", "default_gpus",
           "is_doppler_spec", "doppler_model", "doppler_profile",
           "DOPPLER_PREFIX"]

TICK_S = 1e-10
"""Seconds per time unit of DOPPLER's files (its simulator divides by 1e10)."""

DOPPLER_PREFIX = "doppler:"
"""The model spec prefix that names a DOPPLER file (``doppler:FILE.txt``)."""

_INT = re.compile(r"\d+")


class DopplerGraph:
    """The parsed file: ``n`` op nodes, edges ``src``/``dst`` in file order, ``comp``,
    ``comm`` (integers, the file's units) and ``kinds`` (None where a line gives none)."""

    def __init__(self, n: int, src: list[int], dst: list[int], comp: list[int], comm: list[int],
                 kinds: list[Optional[str]]) -> None:
        self.n, self.src, self.dst, self.comp, self.comm, self.kinds = n, src, dst, comp, comm, kinds


def default_gpus(path: str | Path) -> int:
    """DOPPLER's device count for a file: 8 for ``8gpu_*``, else 4."""
    return 8 if Path(path).name.startswith("8gpu_") else 4


def read_doppler(path: str | Path) -> DopplerGraph:
    """Parse a DOPPLER file.

    Raises:
        ValueError: one sentence on the first problem (missing file, too few lines,
            an edge id out of range, edges of unequal count, a node line without two
            integers, an edge from a higher to a lower id).
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"the DOPPLER graph {str(p)!r} does not exist or is not a file")
    try:
        lines = p.read_text().splitlines()
    except UnicodeDecodeError:
        raise ValueError(f"the DOPPLER graph {str(p)!r} is not a text file") from None
    if len(lines) < 4 or not lines[0].strip().isdigit():
        raise ValueError(f"{p}: not a DOPPLER compute graph (line 1 must be the number of ids, "
                         "lines 2-4 the input ids, edge sources and edge destinations)")
    total = int(lines[0])
    inputs = _INT.findall(lines[1])
    src = [int(x) for x in _INT.findall(lines[2])]
    dst = [int(x) for x in _INT.findall(lines[3])]
    n = total - len(inputs)
    if n <= 0:
        raise ValueError(f"{p}: line 1 gives {total} ids and line 2 {len(inputs)} inputs, "
                         "which leaves no op node")
    if len(src) != len(dst):
        raise ValueError(f"{p}: line 3 has {len(src)} edge sources and line 4 {len(dst)} "
                         "destinations; they must pair up")
    for line_no, ids in ((3, src), (4, dst)):
        bad = [x for x in ids if x >= n]
        if bad:
            raise ValueError(f"{p}: line {line_no} has edge id {bad[0]}, out of range for the "
                             f"{n} op nodes (ids 0-{n - 1}); the file is corrupted, use an "
                             "intact copy (such as the gdp_ one of the same graph)")
    if len(lines) < 4 + n:
        raise ValueError(f"{p}: {n} op nodes need {n} cost lines after line 4, and the file "
                         f"has {len(lines) - 4}")
    comp, comm, kinds = [], [], []
    for k in range(n):
        line = lines[4 + k]
        nums = _INT.findall(line)
        if len(nums) < 2:
            raise ValueError(f"{p}: line {5 + k} must be comp,comm[,kind], not {line!r}")
        comp.append(int(nums[0]))
        comm.append(int(nums[1]))
        kind = re.search(r"[a-zA-Z_]+$", line.strip())
        kinds.append(kind.group(0) if kind else None)
    back = next(((u, v) for u, v in zip(src, dst) if u >= v), None)
    if back is not None:
        raise ValueError(f"{p}: the edge {back[0]} -> {back[1]} goes from a higher to a lower "
                         "id; DOPPLER's graphs list op nodes in a topological order")
    return DopplerGraph(n, src, dst, comp, comm, kinds)


def load_doppler(path: str | Path, devices: Optional[int] = None) -> CostGraph:
    """The cost graph of a DOPPLER file (module docstring) on ``devices`` identical GPUs
    (:func:`default_gpus` when None). The graph's name is the file's stem."""
    g = read_doppler(path)
    k = default_gpus(path) if devices is None else int(devices)
    if k < 1:
        raise ValueError(f"a DOPPLER graph needs at least one device, not {k}")
    n = g.n
    # one edge per (src, dst) pair, kept in file order within each source (DOPPLER's
    # networkx graph lists a node's out-edges so)
    seen: set[tuple[int, int]] = set()
    pairs = [(u, v) for u, v in zip(g.src, g.dst) if not ((u, v) in seen or seen.add((u, v)))]
    pairs.sort(key=lambda e: e[0])   # stable: file order within a source
    edge_src = np.array([u for u, _ in pairs], dtype=np.int64)
    edge_dst = np.array([v for _, v in pairs], dtype=np.int64)
    comp = np.asarray(g.comp, dtype=np.float64) * TICK_S
    kinds = g.kinds if any(x is not None for x in g.kinds) else None
    return CostGraph(
        names=[str(i) for i in range(n)], devices=[f"GPU{j}" for j in range(k)],
        compute_s=np.repeat(comp[:, None], k, axis=1),
        tensor_src=np.arange(n, dtype=np.int64), tensor_bytes=np.zeros(n),
        edge_src=edge_src, edge_dst=edge_dst, edge_tensor=edge_src.copy(),
        tensor_transfer_s=np.asarray(g.comm, dtype=np.float64) * TICK_S,
        op_types=[x or "op" for x in kinds] if kinds else None,
        modeled={f"GPU{j}": False for j in range(k)}, name=Path(path).stem,
        event_order="doppler", time_tick_s=TICK_S)


def doppler_compgraph(graph: CostGraph):
    """The placement graph of a cost graph made by :func:`load_doppler`: one node per op
    (its name, its kind as op type), one edge per (source, destination) pair. What the
    methods that read a graph's structure (HSDAG's features, its message passing) take,
    with the cost graph as their profile."""
    from hsdag_core.compgraph import CompGraph, Edge, Node

    kinds = graph.op_types or ["op"] * graph.num_nodes
    nodes = [Node(name=nm, op_type=kind, ops=[nm], output_shapes=[[1]], output_types=["f32"])
             for nm, kind in zip(graph.names, kinds)]
    edges = [Edge(src=int(u), dst=int(v), port=0, shape=[1], dtype="f32", bytes=0.0)
             for u, v in zip(graph.edge_src, graph.edge_dst)]
    return CompGraph(name=graph.name, nodes=nodes, edges=edges)


def is_doppler_spec(spec: str) -> bool:
    """Whether a model spec names a DOPPLER file (``doppler:FILE.txt``)."""
    return spec.startswith(DOPPLER_PREFIX)


def _spec_path(spec: str) -> Path:
    path = Path(spec[len(DOPPLER_PREFIX):])
    if not path.is_file():
        raise ValueError(f"{spec}: no such DOPPLER compute graph; give doppler:FILE.txt")
    return path


def doppler_model(spec: str):
    """``(cost graph, placement graph)`` of a ``doppler:FILE`` spec; the placement graph's
    edges carry the source's transfer time in ticks as their bytes (so a profile with one
    byte per tick of bandwidth gives the same transfers: :func:`doppler_profile`)."""
    cost = load_doppler(_spec_path(spec))
    graph = doppler_compgraph(cost)
    comm = np.rint(cost.tensor_transfer_s / TICK_S)
    for e in graph.edges:
        e.bytes = float(comm[e.src])
    return cost, graph


def doppler_profile(spec: str):
    """The :class:`~hsdag_core.device_profile.Profile` of a ``doppler:FILE`` spec: each op's
    time on every GPU, a link of one byte per tick (the placement graph's edge bytes are
    the source's transfer ticks), no memory limit, ``source="doppler"`` (its cost graph
    keeps DOPPLER's event order)."""
    from hsdag_core.device_profile import Profile

    cost, _ = doppler_model(spec)
    times = {nm: float(t) for nm, t in zip(cost.names, cost.compute_s[:, 0])}
    return Profile(model=spec, devices={d: {"kind": "measured", "from": "DOPPLER's file"}
                                        for d in cost.devices},
                   op_time_s={d: dict(times) for d in cost.devices}, link_latency_s=0.0,
                   link_bandwidth_Bps=1.0 / TICK_S, source="doppler")
