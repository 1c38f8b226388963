"""Families of graphs to learn placement from, and their fixed train / held-out split.

A policy trained on many graphs should place a graph it never saw. This
module names the graphs: every graph is a model spec that
:func:`hsdag_ray.core.models.load_model` understands, tagged with the model
family it belongs to (``group``), and every family collection has a fixed
split into training and held-out graphs in which whole groups are held out
(no ResNet variant trains when ResNet-50 is held out, no BERT variant when
BERT-base is). Three kinds of graphs:

``gen:layered:n=N:c=C:w=W:seed=S``
    a random layered DAG of ``N`` conv nodes built directly as an OpenVINO
    model (no conversion): node ``i`` reads up to two earlier nodes among the
    ``W`` before it (always ``i-1``), concatenates them, and applies a
    ``k x k`` convolution (``k`` 1 or 3) to a random width in ``C/4 .. 2C``
    channels plus a ReLU; the sinks are pooled into the output.
``gen:cell:cells=L:b=B:c=C:seed=S``
    an ENAS/NASNet-like network: ``L`` copies of one random cell of ``B``
    nodes (each node adds two operations, separable 3x3/5x5 convolution,
    3x3 average/max pool, 1x1 convolution or identity, on two earlier
    states), the cell's unused states concatenated and projected back to
    ``C`` channels; the architecture is drawn from ``seed``.
real models
    the zoo and torchvision/Hugging Face architectures with random weights
    (``resnet50``, ``tv:mobilenet_v3_small``, ``hf:gpt2`` ...), converted once
    and cached (10-60 s each).

Devices of a family are modeled from specs (no profiling, the same for every
graph): ``CPU_MODEL`` and an accelerator with the specs of ``GPU_SMALLMEM``
whose weight memory holds ``mem_fraction`` (default half) of the graph's
weights, so on every graph, small or large, the optimum is a real split
(:func:`family_profile`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from hsdag_ray.core.errors import GraphError

__all__ = ["FamilyGraph", "Family", "FAMILIES", "get_family", "generated_model", "is_generated",
           "family_profile", "FAMILY_DEVICES", "ACCELERATOR", "graph_spec_family"]

#: the modeled accelerator of a family: GPU_SMALLMEM's speed, memory for part of the weights
ACCELERATOR = "GPU_PARTMEM"
#: the devices every family graph is placed on
FAMILY_DEVICES = ("CPU_MODEL", ACCELERATOR)
GEN_PREFIX = "gen:"


@dataclass(frozen=True)
class FamilyGraph:
    """One graph of a family: its model spec and the model family it belongs to."""

    spec: str
    group: str


@dataclass(frozen=True)
class Family:
    """A fixed split of graphs: ``train`` to learn on, ``held_out`` never seen in training.

    Attributes:
        name: the ``--family`` name.
        description: one line.
        train / held_out: the graphs; no ``group`` appears in both.
        real: True if some graph is a converted real model (slow the first time).
    """

    name: str
    description: str
    train: tuple[FamilyGraph, ...]
    held_out: tuple[FamilyGraph, ...]
    real: bool = False

    def __post_init__(self) -> None:
        shared = {g.group for g in self.train} & {g.group for g in self.held_out}
        if shared:
            raise ValueError(f"family {self.name}: group {sorted(shared)[0]} is both trained on "
                             "and held out")

    def graphs(self, split: str) -> tuple[FamilyGraph, ...]:
        """``train``, ``held_out`` or ``all``."""
        if split == "train":
            return self.train
        if split == "held_out":
            return self.held_out
        if split == "all":
            return self.train + self.held_out
        raise ValueError(f"unknown split {split!r}; choose train, held_out or all")


# =================================================================== generated models
def is_generated(spec: str) -> bool:
    return spec.startswith(GEN_PREFIX)


def _parse(spec: str) -> tuple[str, dict[str, int]]:
    parts = spec[len(GEN_PREFIX):].split(":")
    kind, params = parts[0], {}
    for p in parts[1:]:
        key, _, value = p.partition("=")
        try:
            params[key] = int(value)
        except ValueError:
            raise GraphError(f"bad generated model {spec!r}: {p!r} is not KEY=INTEGER") from None
    return kind, params


def generated_model(spec: str):
    """The ``openvino.Model`` of a ``gen:`` spec (see the module docstring); deterministic."""
    kind, p = _parse(spec)
    try:
        if kind == "layered":
            return _layered(spec, p.pop("n"), p.pop("c", 32), p.pop("w", 8), p.pop("seed", 0),
                            p.pop("size", 32))
        if kind == "cell":
            return _cells(spec, p.pop("cells", 3), p.pop("b", 4), p.pop("c", 32),
                          p.pop("seed", 0), p.pop("size", 32))
    except KeyError as e:
        raise GraphError(f"generated model {spec!r} needs {e.args[0]}=...") from None
    raise GraphError(f"unknown generated model kind {kind!r} in {spec!r}; use gen:layered:n=N:... "
                     "or gen:cell:cells=L:...")


class _Builder:
    """Small helpers over ``openvino.opset13`` with unique op names and seeded weights."""

    def __init__(self, seed: int) -> None:
        from openvino import opset13

        self.ops = opset13
        self.rng = np.random.default_rng(seed)
        self.count = 0

    def name(self, what: str) -> str:
        self.count += 1
        return f"{what}{self.count}"

    def conv(self, x, cin: int, cout: int, k: int, groups: int = 1):
        ops, nm = self.ops, self.name("conv")
        pad = [k // 2, k // 2]
        if groups == 1:
            w = (self.rng.standard_normal((cout, cin, k, k)) * (2.0 / (cin * k * k)) ** 0.5)
            return ops.convolution(x, ops.constant(w.astype(np.float32), name=nm + "/w"),
                                   [1, 1], pad, pad, [1, 1], name=nm)
        w = self.rng.standard_normal((groups, cout // groups, cin // groups, k, k)) * (2.0 / (k * k)) ** 0.5
        return ops.group_convolution(x, ops.constant(w.astype(np.float32), name=nm + "/w"),
                                     [1, 1], pad, pad, [1, 1], name=nm)

    def relu(self, x):
        return self.ops.relu(x, name=self.name("relu"))

    def concat(self, xs):
        return xs[0] if len(xs) == 1 else self.ops.concat(xs, 1, name=self.name("concat"))

    def finish(self, outs, spec: str):
        import openvino as ov

        ops = self.ops
        pooled = ops.reduce_mean(self.concat(outs), ops.constant(np.array([2, 3], np.int64),
                                                                 name="pool/axes"),
                                 False, name="pool")
        model = ov.Model([ops.result(pooled, name="out")], [self.input], spec)
        model.set_friendly_name(spec)
        return model


def _layered(spec: str, n: int, c: int, window: int, seed: int, size: int):
    if n < 2 or c < 4 or window < 1:
        raise GraphError(f"generated model {spec!r} needs n >= 2, c >= 4 and w >= 1")
    b = _Builder(seed)
    x = b.input = b.ops.parameter([1, 3, size, size], np.float32, name="input")
    outs, widths, used = [], [], set()
    choices = [max(4, c // 4), max(4, c // 2), c, 2 * c]
    for i in range(n):
        if i == 0:
            parents = []
        else:
            k = min(i, window)
            parents = sorted({i - 1, i - 1 - int(b.rng.integers(0, k))})
        used.update(parents)
        inp = b.concat([outs[j] for j in parents]) if parents else x
        cin = sum(widths[j] for j in parents) if parents else 3
        cout = int(b.rng.choice(choices))
        k = int(b.rng.choice([1, 3, 3]))
        outs.append(b.relu(b.conv(inp, cin, cout, k)))
        widths.append(cout)
    return b.finish([o for i, o in enumerate(outs) if i not in used], spec)


#: operations of a NAS cell
_CELL_OPS = ("sep3", "sep5", "avg3", "max3", "conv1", "identity")


def _cells(spec: str, cells: int, nodes: int, c: int, seed: int, size: int):
    if cells < 1 or nodes < 1 or c < 4:
        raise GraphError(f"generated model {spec!r} needs cells >= 1, b >= 1 and c >= 4")
    b = _Builder(seed)
    ops = b.ops
    # the architecture: per node two (input state, operation) pairs
    arch = [[(int(b.rng.integers(0, j + 2)), _CELL_OPS[int(b.rng.integers(0, len(_CELL_OPS)))])
             for _ in range(2)] for j in range(nodes)]
    x = b.input = ops.parameter([1, 3, size, size], np.float32, name="input")
    stem = b.relu(b.conv(x, 3, c, 3))
    prev2, prev = stem, stem

    def apply(h, op):
        if op == "identity":
            return h
        if op in ("sep3", "sep5"):
            k = 3 if op == "sep3" else 5
            return b.conv(b.relu(b.conv(b.relu(h), c, c, k, groups=c)), c, c, 1)
        if op == "avg3":
            return ops.avg_pool(h, [1, 1], [1, 1], [1, 1], [3, 3], True, name=b.name("avgpool"))
        if op == "max3":
            return ops.max_pool(h, [1, 1], [1, 1], [1, 1], [1, 1], [3, 3], name=b.name("maxpool")).output(0)
        return b.relu(b.conv(h, c, c, 1))

    for _ in range(cells):
        states = [prev2, prev]
        used: set[int] = set()
        for pairs in arch:
            terms = [apply(states[src], op) for src, op in pairs]
            used.update(src for src, _ in pairs)
            states.append(ops.add(terms[0], terms[1], name=b.name("add")))
        loose = [s for k, s in enumerate(states) if k >= 2 and k not in used]
        out = b.relu(b.conv(b.concat(loose), c * len(loose), c, 1))
        prev2, prev = prev, out
    return b.finish([prev], spec)


# ======================================================================== profiles
def family_profile(graph, mem_fraction: float = 0.5, boundary_s: float = 1e-4):
    """The profile of a family graph (a :class:`~hsdag_ray.core.graph.CompGraph`) from
    device specs: ``CPU_MODEL`` and :data:`ACCELERATOR` (``GPU_SMALLMEM``'s speed
    and links, weight memory for ``mem_fraction`` of the graph's weights).
    A stage boundary costs ``boundary_s`` (0.1 ms: a synchronisation with an
    accelerator; 0.5 ms was fitted between two CPU configurations, where it made
    every graph of tens of microseconds per node best on one device)."""
    from hsdag_ray.core.profile import MODELED_DEVICES, Profile, add_modeled_device

    weights = float(sum(nd.weight_bytes for nd in graph.nodes))
    prof = Profile(model=graph.name, devices={}, op_time_s={})
    add_modeled_device(prof, graph, "CPU_MODEL")
    spec = replace(MODELED_DEVICES["GPU_SMALLMEM"], memory_bytes=max(mem_fraction * weights, 1.0))
    add_modeled_device(prof, graph, ACCELERATOR, spec)
    prof.boundary_s = boundary_s
    return prof


# ======================================================================== families
def _layered_graphs(sizes, seeds, c: int, window: int, group: str) -> tuple[FamilyGraph, ...]:
    return tuple(FamilyGraph(f"gen:layered:n={n}:c={c}:w={window}:seed={s}", group)
                 for n, s in zip(sizes, seeds))


def _cell_graphs(archs, cells, c: int) -> tuple[FamilyGraph, ...]:
    return tuple(FamilyGraph(f"gen:cell:cells={L}:b=4:c={c}:seed={a}", f"cell-arch{a}")
                 for a, L in zip(archs, cells))


_TINY = Family(
    "tiny", "small layered DAGs (8-14 nodes) for tests and quick runs",
    train=_layered_graphs((8, 10, 12, 9), (0, 1, 2, 3), 32, 4, "layered-w4"),
    held_out=_layered_graphs((11, 14), (100, 101), 32, 2, "layered-w2"))

_LAYERED = Family(
    "layered", "random layered DAGs of 20-60 nodes; held out: the narrow-window variant",
    train=_layered_graphs((20, 30, 40, 50, 25, 35, 45, 60), range(8), 32, 8, "layered-w8"),
    held_out=_layered_graphs((30, 50), (100, 101), 32, 3, "layered-w3"))

_CELLS = Family(
    "cells", "ENAS/NASNet-like cell networks (2-4 cells of 4 nodes); held out: unseen architectures",
    train=_cell_graphs(range(6), (2, 3, 2, 3, 4, 2), 64),
    held_out=_cell_graphs((100, 101), (3, 3), 64))

_SYNTHETIC = Family("synthetic", "layered DAGs and NAS cells together",
                    train=_LAYERED.train + _CELLS.train, held_out=_LAYERED.held_out + _CELLS.held_out)

_REAL = Family(
    "real", "torchvision / Hugging Face models with random weights; whole families held out "
            "(ResNet, Inception, ConvNeXt, BERT)",
    train=(FamilyGraph("tv:mobilenet_v3_small", "mobilenet"), FamilyGraph("tv:efficientnet_b0", "efficientnet"),
           FamilyGraph("tv:regnet_y_400mf", "regnet"), FamilyGraph("tv:squeezenet1_0", "squeezenet"),
           FamilyGraph("tv:vgg11", "vgg"), FamilyGraph("tv:densenet121", "densenet"),
           FamilyGraph("hf:gpt2", "gpt")),
    held_out=(FamilyGraph("resnet50", "resnet"), FamilyGraph("inception_v3", "inception"),
              FamilyGraph("tv:convnext_tiny", "convnext"), FamilyGraph("bert_base", "bert"),
              FamilyGraph("hf:distilbert", "bert")),
    real=True)

_ALL = Family("all", "the synthetic and the real families together",
              train=_SYNTHETIC.train + _REAL.train, held_out=_SYNTHETIC.held_out + _REAL.held_out,
              real=True)

FAMILIES: dict[str, Family] = {f.name: f for f in (_TINY, _LAYERED, _CELLS, _SYNTHETIC, _REAL, _ALL)}


def get_family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise GraphError(f"unknown graph family {name!r}; choose one of {', '.join(FAMILIES)}") from None


def graph_spec_family(spec: str) -> Optional[Family]:
    """The first family listing ``spec``, or None."""
    for fam in FAMILIES.values():
        if any(g.spec == spec for g in fam.graphs("all")):
            return fam
    return None
