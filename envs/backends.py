"""Every measuring backend, by name: what ``--backend`` chooses.

A backend is a class behind :class:`envs.base.Backend`; its kind is registered here once
with a factory that builds it for a graph, so the command line, the run's checks and the
environment read one list. Adding a backend is its own module plus one :func:`register`
call below. Factories are named as ``"package.module:function"`` and imported only when
a backend is built, so listing the backends imports nothing heavy.

A factory is called as ``factory(graph, model=..., devices=..., timing=..., profile=...,
objective=..., sim_delay_s=...)`` and returns an :class:`envs.base.Backend`.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

__all__ = ["BackendKind", "BACKENDS", "register", "get", "is_real", "build", "graph_source",
           "objective_error"]


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
        source: where its graph comes from: ``openvino`` (an ``openvino.Model``,
            :func:`hsdag_core.compgraph.from_ov_model`) or ``torch`` (``torch.export``,
            :mod:`hsdag_core.torch_graph`); the simulator's follows its profile.
        objectives: the objectives it measures (``sequential``: the latency of one
            inference; ``throughput``: a pipeline's time per sample; ``parallel``:
            independent stages of one inference concurrently).
        default_devices: the devices a run measures on when it names none (a simulator's
            come from its profile: none here).
        auto_device: ``measure --placement auto`` compiles the whole model on OpenVINO's
            AUTO device over its devices (the device OpenVINO itself would choose).
    """

    name: str
    factory: str
    real: bool
    description: str
    source: str = "openvino"
    objectives: tuple[str, ...] = ("sequential",)
    default_devices: tuple[str, ...] = ()
    auto_device: bool = False

    @property
    def simulated(self) -> bool:
        """A cost model gives its latencies: it measures with a profile, which its run
        must have (recorded, or given with ``--profile``)."""
        return not self.real

    def check_devices(self, specs: list[str], threads: int = 0, here: bool = True) -> list[str]:
        """The names of the device ``specs`` this backend measures on, each checked to be
        one it can drive on this machine (``here=False``, a run measured on other machines:
        read only); ``ValueError`` with one sentence on a bad one."""
        return _DEVICE_FAMILIES[self.source].check(list(specs), threads, here)

    def describe_devices(self, specs: list[str], threads: int = 0) -> list[str]:
        """One line per device spec: what it is (for a run's or a table's header)."""
        return _DEVICE_FAMILIES[self.source].describe(list(specs), threads)


class _OpenVINODevices:
    """OpenVINO's real and virtual devices (``CPU``, ``CPU_F32``, ``GPU.1``...)."""

    @staticmethod
    def check(specs: list[str], threads: int, here: bool) -> list[str]:
        from envs.openvino_backend import check_devices

        return [i.name for i in check_devices(specs, default_threads=threads)]

    @staticmethod
    def describe(specs: list[str], threads: int) -> list[str]:
        from envs.openvino_backend import DeviceSet

        return DeviceSet(specs, default_threads=threads).describe()


class _TorchDevices:
    """PyTorch devices (``cpu``, ``cpu:bf16``, ``cuda:N[:mem=SIZE]``)."""

    @staticmethod
    def check(specs: list[str], threads: int, here: bool) -> list[str]:
        from envs.pytorch.devices import check_devices, parse_device

        if not here:
            return [parse_device(s).name for s in specs]
        return [d.name for d in check_devices(specs)]

    @staticmethod
    def describe(specs: list[str], threads: int) -> list[str]:
        from envs.pytorch.devices import parse_device

        return [parse_device(s).describe() for s in specs]


#: the devices of each graph source, checked and described
_DEVICE_FAMILIES = {"openvino": _OpenVINODevices, "torch": _TorchDevices}


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


def graph_source(name: str, profile_source: str = "") -> str:
    """Where the graph of a run on backend ``name`` comes from: the backend's own source, or
    for the simulator the source its profile was recorded from (``profile_source``,
    :attr:`hsdag_core.device_profile.Profile.source`; OpenVINO when none is given)."""
    kind = get(name)
    if not kind.real and profile_source:
        return profile_source
    return kind.source


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
    mod, _, attr = get(name).factory.partition(":")
    return getattr(importlib.import_module(mod), attr)(graph, **kwargs)


#: a run on OpenVINO that names no devices: two configurations of the CPU plugin
OPENVINO_DEVICES = ("CPU", "CPU_F32")
register(BackendKind("auto", "envs.graph_backend:openvino_backend", True,
                     "OpenVINO: HETERO, falling back to the stage pipeline where HETERO fails",
                     default_devices=OPENVINO_DEVICES, auto_device=True))
register(BackendKind("hetero", "envs.graph_backend:openvino_backend", True,
                     "OpenVINO HETERO with an affinity on every op", default_devices=OPENVINO_DEVICES))
register(BackendKind("pipeline", "envs.graph_backend:openvino_backend", True,
                     "OpenVINO: the model split into stages compiled per device",
                     default_devices=OPENVINO_DEVICES))
register(BackendKind("simulator", "envs.graph_backend:simulator_backend", False,
                     "the cost model of a profile (sequential, parallel, throughput or latency "
                     "objective)", objectives=("sequential", "parallel", "throughput", "latency")))
register(BackendKind("torch", "envs.pytorch:torch_backend", True,
                     "PyTorch: the model exported with torch.export, split into stages per device "
                     "(cpu, cpu:bf16, cuda:N; :mem=SIZE caps a device); sequential or pipelined "
                     "(throughput objective)", source="torch", objectives=("sequential", "throughput"),
                     default_devices=("cpu", "cpu:bf16")))
