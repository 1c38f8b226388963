"""Every measuring backend, by name: what ``--backend`` chooses.

A backend is a class behind :class:`envs.base.Backend` in its own package, which also owns
its graph source (:class:`envs.source.GraphSource`: building the graph, checking and
describing its devices, recording a profile, applying a placement, loading a placed model).
Its kind is registered here once with a factory that builds it for a graph and the source it
reads, so the command line, the run's checks and the environment read one list and call the
source's hooks. Adding a backend is its own package plus one :func:`register` call below.
Factories and sources are named as ``"package.module:attribute"`` and imported only when
used, so listing the backends imports nothing heavy.

A factory is called as ``factory(graph, model=..., devices=..., timing=..., profile=...,
objective=..., sim_delay_s=..., backend=...)`` (``backend``: the name it is registered
under) and returns an :class:`envs.base.Backend`.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Optional

__all__ = ["BackendKind", "BACKENDS", "register", "get", "is_real", "build", "graph_source",
           "source_named", "load_ref", "objective_error", "SIMULATOR", "REAL_DEFAULT", "build_graph"]

#: the OpenVINO graph source (:mod:`envs.openvino.source`): a backend's unless it names another
OPENVINO_SOURCE = "envs.openvino.source:SOURCE"


@dataclass(frozen=True)
class BackendKind:
    """One ``--backend`` choice.

    Attributes:
        name: the ``--backend`` name.
        factory: ``"pkg.mod:function"`` that builds the backend for a graph.
        real: it measures on real devices (a measuring machine holds them; a run pins
            its measuring actors there and re-measures its figures at the end); False:
            a cost model computes the latency.
        description: one line for ``--help`` and errors.
        source: ``"pkg.mod:attribute"``, the backend package's
            :class:`envs.source.GraphSource`: where its graph comes from, how its devices
            are checked and described, how a profile is recorded, a placement applied and
            a placed model loaded. A simulated backend's graph follows its profile's
            source (:func:`graph_source`); this one when the profile names none.
        objectives: the objectives it measures (``sequential``: the latency of one
            inference; ``throughput``: a pipeline's time per sample; ``parallel``:
            independent stages of one inference concurrently).
        default_devices: the devices a run measures on when it names none (a simulator's
            come from its profile: none here).
        auto_device: ``measure --placement auto`` compiles the whole model on OpenVINO's
            AUTO device over its devices (the device OpenVINO itself would choose).
        applies: ``python -m hsdag_ray.apply`` takes it (its source's
            :meth:`~envs.source.GraphSource.apply`); by default a real backend does.
    """

    name: str
    factory: str
    real: bool
    description: str
    source: str = OPENVINO_SOURCE
    objectives: tuple[str, ...] = ("sequential",)
    default_devices: tuple[str, ...] = ()
    auto_device: bool = False
    applies: Optional[bool] = None

    @property
    def simulated(self) -> bool:
        """A cost model gives its latencies: it measures with a profile, which its run
        must have (recorded, or given with ``--profile``)."""
        return not self.real

    @property
    def graph(self):
        """Its graph source (:class:`envs.source.GraphSource`), imported on first use."""
        return load_ref(self.source)

    @property
    def deploys(self) -> bool:
        """``python -m hsdag_ray.apply`` takes it (:attr:`applies`)."""
        return self.real if self.applies is None else self.applies

    def check_devices(self, specs: list[str], threads: int = 0, here: bool = True) -> list[str]:
        """The names of the device ``specs`` this backend measures on, each checked to be
        one it can drive on this machine (``here=False``, a run measured on other machines:
        read only); ``ValueError`` with one sentence on a bad one."""
        return self.graph.check_devices(list(specs), threads, here)

    def describe_devices(self, specs: list[str], threads: int = 0) -> list[str]:
        """One line per device spec: what it is (for a run's or a table's header)."""
        return self.graph.describe_devices(list(specs), threads)


def load_ref(ref: str):
    """The object a ``"pkg.mod:attribute"`` reference names, imported on first use."""
    mod, _, attr = ref.partition(":")
    return getattr(importlib.import_module(mod), attr)


BACKENDS: dict[str, BackendKind] = {}


def register(kind: BackendKind) -> BackendKind:
    if kind.name in BACKENDS:
        raise ValueError(f"backend {kind.name!r} is registered twice")
    BACKENDS[kind.name] = kind
    return kind


def get(name: str) -> BackendKind:
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}") from None


def is_real(name: str) -> bool:
    """Whether the backend ``name`` measures on real devices."""
    return get(name).real


def graph_source(name: str, profile_source: str = ""):
    """The graph source (:class:`envs.source.GraphSource`) of a run on backend ``name``: the
    backend's own, or for a simulated backend the source its profile was recorded from
    (``profile_source``, :attr:`hsdag_core.device_profile.Profile.source`) when a registered
    backend has it."""
    kind = get(name)
    if kind.simulated and profile_source:
        return source_named(profile_source) or kind.graph
    return kind.graph


def source_named(source: str):
    """The registered graph source called ``source`` (a profile's or a placed model's
    record of it), or None."""
    for ref in dict.fromkeys(k.source for k in BACKENDS.values()):
        found = load_ref(ref)
        if found.name == source:
            return found
    return None


def build_graph(model_spec: str, coarsening: str = "none", input_shapes=None, backend: str = "auto",
                profile_source: str = ""):
    """``(model, fine graph, coarse graph, fine node -> coarse node)`` of ``model_spec`` as
    backend ``backend`` places it (:func:`graph_source`)."""
    return graph_source(backend, profile_source).build(model_spec, coarsening, input_shapes)


def objective_error(name: str, objective: str) -> str:
    """A sentence when backend ``name`` cannot measure ``objective``, else ``""``."""
    kind = get(name)
    if objective in kind.objectives:
        return ""
    able = [k.name for k in BACKENDS.values() if objective in k.objectives]
    return (f"the {name} backend measures the {' or '.join(kind.objectives)} objective, not "
            f"{objective}; use --backend {' or '.join(able)} for it")


def build(name: str, graph, **kwargs: Any):
    """The backend ``name`` for ``graph`` (see the module docstring for ``kwargs``);
    :class:`~hsdag_core.errors.GraphError` when it cannot measure ``kwargs["objective"]``."""
    from hsdag_core.errors import GraphError

    error = objective_error(name, kwargs.get("objective", "sequential"))
    if error:
        raise GraphError(error)
    return load_ref(get(name).factory)(graph, **{**kwargs, "backend": name})


#: a run on OpenVINO that names no devices: two configurations of the CPU plugin
OPENVINO_DEVICES = ("CPU", "CPU_F32")
#: the cost model a run falls back to, and a sweep's backend when it names none
SIMULATOR = "simulator"
#: a run that names no backend, on a machine with two real devices
REAL_DEFAULT = "auto"
register(BackendKind("auto", "envs.openvino.node_backend:openvino_graph_backend", True,
                     "OpenVINO: HETERO, falling back to the stage pipeline where HETERO fails",
                     default_devices=OPENVINO_DEVICES, auto_device=True))
register(BackendKind("hetero", "envs.openvino.node_backend:openvino_graph_backend", True,
                     "OpenVINO HETERO with an affinity on every op", default_devices=OPENVINO_DEVICES))
register(BackendKind("pipeline", "envs.openvino.node_backend:openvino_graph_backend", True,
                     "OpenVINO: the model split into stages compiled per device",
                     default_devices=OPENVINO_DEVICES))
register(BackendKind(SIMULATOR, "envs.graph_backend:simulator_backend", False,
                     "the cost model of a profile (sequential, parallel, throughput or latency "
                     "objective)", objectives=("sequential", "parallel", "throughput", "latency")))
register(BackendKind("torch", "envs.pytorch:torch_backend", True,
                     "PyTorch: the model exported with torch.export, split into stages per device "
                     "(cpu, cpu:bf16, cuda:N; :mem=SIZE caps a device); sequential or pipelined "
                     "(throughput objective)", source="envs.pytorch.source:SOURCE", objectives=("sequential", "throughput"),
                     default_devices=("cpu", "cpu:bf16")))
