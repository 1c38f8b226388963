"""Families of graphs to learn placement from, and their fixed train / held-out split.

A policy trained on many graphs should place a graph it never saw. This
module names the graphs: every graph is a model spec that
:func:`hsdag_core.models.load_model` understands, tagged with the model
family it belongs to (``group``), and every family collection has a fixed
split into training and held-out graphs in which whole groups are held out
(no ResNet variant trains when ResNet-50 is held out, no BERT variant when
BERT-base is). Three kinds of graphs:

``gen:layered:...`` and ``gen:cell:...``
    random layered DAGs and ENAS/NASNet-like cell networks built directly as
    OpenVINO models (:mod:`hsdag_core.generated`).
real models
    the zoo and torchvision/Hugging Face architectures with random weights
    (``resnet50``, ``tv:mobilenet_v3_small``, ``hf:gpt2`` ...), converted once
    and cached (10-60 s each).

Devices of a family are modeled from specs (no profiling, the same for every
graph): ``CPU_MODEL`` and one of :data:`FAMILY_ACCELERATORS`
(:func:`family_profile`):

``GPU_PARTMEM`` (the default)
    the specs of ``GPU_SMALLMEM`` with weight memory for ``mem_fraction``
    (default half) of the graph's weights, so on every graph, small or large,
    the optimum is a split that memory forces;
``NPU_MODEL``
    unlimited memory, dense math 10x the CPU's but half its memory bandwidth
    and a launch cost per op: memory-bound ops (embeddings, gathers) are faster
    on the CPU, so the optimum splits by the kind of op, and the repair rule
    (:mod:`hsdag_core.fit`) has nothing to decide.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from hsdag_core.errors import GraphError

__all__ = ["FamilyGraph", "Family", "FAMILIES", "get_family", "family_profile", "family_devices",
           "FAMILY_DEVICES", "ACCELERATOR", "FAMILY_ACCELERATORS", "graph_spec_family"]

#: the default modeled accelerator of a family: GPU_SMALLMEM's speed, memory for part of the weights
ACCELERATOR = "GPU_PARTMEM"
#: the accelerators a family graph may be placed on next to ``CPU_MODEL``: name -> what it is
FAMILY_ACCELERATORS = {
    "GPU_PARTMEM": "GPU_SMALLMEM's speed, memory for half of each graph's weights (memory decides)",
    "NPU_MODEL": "unlimited memory, fast dense math, slow memory-bound ops (the kind of op decides)",
}
#: the devices every family graph is placed on by default
FAMILY_DEVICES = ("CPU_MODEL", ACCELERATOR)


def family_devices(accelerator: str = ACCELERATOR) -> list[str]:
    """``["CPU_MODEL", accelerator]`` after checking the accelerator is a family's."""
    if accelerator not in FAMILY_ACCELERATORS:
        raise GraphError(f"unknown family accelerator {accelerator!r}; choose one of "
                         f"{', '.join(FAMILY_ACCELERATORS)}")
    return ["CPU_MODEL", accelerator]


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


# ======================================================================== profiles
def family_profile(graph, mem_fraction: float = 0.5, boundary_s: float = 1e-4,
                   accelerator: str = ACCELERATOR):
    """The profile of a family graph (a :class:`~hsdag_core.compgraph.CompGraph`) from
    device specs: ``CPU_MODEL`` and ``accelerator`` (:data:`FAMILY_ACCELERATORS`):
    ``GPU_PARTMEM`` has ``GPU_SMALLMEM``'s speed and links and weight memory for
    ``mem_fraction`` of the graph's weights; ``NPU_MODEL`` is the ready-made spec.
    A stage boundary costs ``boundary_s`` (0.1 ms: a synchronisation with an
    accelerator; 0.5 ms was fitted between two CPU configurations, where it made
    every graph of tens of microseconds per node best on one device)."""
    from hsdag_core.device_profile import MODELED_DEVICES, Profile, add_modeled_device

    family_devices(accelerator)  # a known one
    prof = Profile(model=graph.name, devices={}, op_time_s={})
    add_modeled_device(prof, graph, "CPU_MODEL")
    if accelerator == "GPU_PARTMEM":
        weights = float(sum(nd.weight_bytes for nd in graph.nodes))
        spec = replace(MODELED_DEVICES["GPU_SMALLMEM"], memory_bytes=max(mem_fraction * weights, 1.0))
    else:
        spec = MODELED_DEVICES[accelerator]
    add_modeled_device(prof, graph, accelerator, spec)
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

def _trained_on_more(base: Family, name: str, description: str, *graphs: tuple[str, str]) -> Family:
    """``base``'s held-out graphs after its training graphs and ``graphs`` (spec, group)."""
    return Family(name, description, train=base.train + tuple(FamilyGraph(s, g) for s, g in graphs),
                  held_out=base.held_out, real=base.real)


_REAL_WIDE = _trained_on_more(
    _REAL, "real-wide", "the real family's held-out graphs, twice its training architectures: two more "
                        "CNN families (ShuffleNet, MnasNet), a convolution-attention hybrid (MaxViT) and "
                        "five more transformers (Swin, ViT, T5, BART, OPT)",
    ("tv:shufflenet_v2_x0_5", "shufflenet"), ("tv:mnasnet0_5", "mnasnet"), ("tv:maxvit_t", "maxvit"),
    ("tv:swin_t", "swin"), ("tv:vit_b_16", "vit"), ("hf:t5", "t5"), ("hf:bart", "bart"),
    ("hf:opt:num_hidden_layers=6", "opt"))

_REAL_SIZES = _trained_on_more(
    _REAL_WIDE, "real-sizes", "real-wide with larger members of its CNN families (RegNet-Y 1.6 and 3.2 "
                              "GF, DenseNet-169, EfficientNet-V2-S, ShuffleNet-V2 2.0x, MobileNet-V3-large, "
                              "MnasNet 1.0), so the same architecture is met at sizes where another device wins",
    ("tv:regnet_y_1_6gf", "regnet"), ("tv:regnet_y_3_2gf", "regnet"), ("tv:densenet169", "densenet"),
    ("tv:efficientnet_v2_s", "efficientnet"), ("tv:shufflenet_v2_x2_0", "shufflenet"),
    ("tv:mobilenet_v3_large", "mobilenet"), ("tv:mnasnet1_0", "mnasnet"))

_ALL = Family("all", "the synthetic and the real families together",
              train=_SYNTHETIC.train + _REAL.train, held_out=_SYNTHETIC.held_out + _REAL.held_out,
              real=True)

FAMILIES: dict[str, Family] = {f.name: f for f in (_TINY, _LAYERED, _CELLS, _SYNTHETIC, _REAL, _REAL_WIDE,
                                                   _REAL_SIZES, _ALL)}


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
