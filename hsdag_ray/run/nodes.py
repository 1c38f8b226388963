"""Which machines of a Ray cluster may measure a run: measuring slots, device sets, GPUs.

A measuring machine advertises one ``measure_slot`` (one measurement at a
time on it) and, on a cluster of machines with different devices, the set of
devices it has as a custom resource named by :func:`devices_resource`: the
device names sorted and joined by ``+`` after ``devices_``, e.g.
``devices_CPU+GPU`` (OpenVINO devices of an Intel machine) or
``devices_cpu+cuda:0`` (PyTorch devices of a machine with an NVIDIA GPU,
measured by ``--backend torch``); see ``cluster/config.yaml``. The names are
kept as the user types them, ``:`` included: Ray 2.60 accepts ``:`` in a
resource name (its own ``node:<ip>`` and ``accelerator_type:<type>`` resources
have one, and a local Ray started with ``devices_cpu+cuda:0`` schedules on it), but
not ``,`` (its raylet reads the resources as a comma-separated list, so a node
advertising one never starts), and device names never hold a comma
(``--devices`` is split on it). Device *settings* are not
part of the set: ``cuda:0:mem=2GB`` and ``CPU_FAST=CPU:precision=bf16`` are the
devices ``cuda:0`` and ``CPU_FAST`` (:func:`device_name`).

A run with a real backend asks every measuring actor (EnvRunners, the
baselines' and re-measurement's service, a search's) for both, so it measures
only on machines that have its devices. A cluster where no machine names its
devices is taken as uniform: then a slot is all a run asks for. A measuring
actor of a real backend on CUDA devices also asks Ray for the GPUs it measures
on (:func:`envs.gpus.gpus_needed`): Ray makes only the GPUs an actor holds visible to it.
"""
from __future__ import annotations

from collections import Counter
from itertools import takewhile
from typing import Mapping, Optional, Sequence

from hsdag_ray.cli import UsageError
from envs.gpus import gpus_needed, measuring_gpus  # noqa: F401 - re-exported
from hsdag_ray.run.config import MEASURE_RESOURCE

__all__ = ["DEVICES_PREFIX", "device_name", "devices_resource", "gpus_needed", "machines_of",
           "measuring_gpus", "measuring_resources", "measuring_slots", "unsatisfiable"]

#: prefix of the custom resource that names a machine's device set
DEVICES_PREFIX = "devices_"


def device_name(spec: str) -> str:
    """The name of the device a ``--devices`` spec describes, without its settings. A
    PyTorch spec (``cpu...`` or ``cuda...``) is named by the torch backend's own rule
    (:func:`envs.pytorch.devices.parse_device`: ``cuda:0:mem=2GB`` and ``cuda`` are
    ``cuda:0``, ``cpu:bf16`` stays ``cpu:bf16``); an OpenVINO virtual device
    ``NAME=BASE[:k=v...]`` is ``NAME``; any other spec is its ``:``-separated parts up to
    the first ``key=value`` one (``CPU:precision=f32`` is ``CPU``). A machine has a
    device whatever settings a run gives it, so device sets compare by name."""
    parts = spec.split(":")
    if parts[0] in ("cpu", "cuda"):
        from envs.pytorch.devices import parse_device

        try:
            return parse_device(spec).name
        except ValueError:  # not a spec the torch backend reads: named as typed, below
            pass
    if "=" in parts[0]:
        return parts[0].partition("=")[0]
    return ":".join(takewhile(lambda part: "=" not in part, parts))


def devices_resource(devices: Sequence[str]) -> str:
    """The resource a machine with exactly ``devices`` (names or specs, in any order)
    advertises: ``devices_`` and the device names sorted and joined by ``+``, each as
    typed (``cpu,cuda:0`` -> ``devices_cpu+cuda:0``; see the module docstring for why
    ``:`` stays)."""
    return DEVICES_PREFIX + "+".join(sorted({device_name(d) for d in devices}))


def _devices_typed(resource: str) -> str:
    """The ``--devices`` value that names the device set ``resource``."""
    return resource[len(DEVICES_PREFIX):].replace("+", ",")


#: a PyTorch CUDA device name: ``cuda`` (the first GPU) or ``cuda:<index>``, with or
#: without a further ``:`` part of the name (``cuda:0:bf16``)

#: seconds a machine the cluster lists as alive has to answer before a run counts it
ANSWER_TIMEOUT_S = 30.0


def _alive_resources() -> list[dict[str, float]]:
    import ray

    return [n["Resources"] for n in ray.nodes() if n.get("Alive")]


def _answering(nodes: list[dict], timeout_s: float) -> list[dict]:
    """The nodes of ``nodes`` (``ray.nodes()`` entries) that run a task within
    ``timeout_s``. A machine killed moments ago is listed as alive until the cluster
    misses its heartbeats (about 30 s); an EnvRunner placed on it would never start,
    and RLlib waits for every EnvRunner it builds without a time limit."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=0)
    def here() -> bool:
        return True

    probes = {here.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        n["NodeID"], soft=False)).remote(): n for n in nodes}
    done, late = ray.wait(list(probes), num_returns=len(probes), timeout=timeout_s)
    for ref in late:
        ray.cancel(ref, force=True)
    answered = []
    for ref in done:
        try:
            ray.get(ref)
            answered.append(probes[ref])
        except Exception:  # noqa: BLE001 - a machine that died while probed
            pass
    return answered


def measuring_resources(devices: Sequence[str]) -> dict[str, float]:
    """What each measuring actor of a run on ``devices`` asks for; a
    :class:`~hsdag_ray.cli.UsageError` when the cluster names device sets and
    no measuring machine has these devices."""
    nodes = [r for r in _alive_resources() if r.get(MEASURE_RESOURCE)]
    named = sorted({k for r in nodes for k in r if k.startswith(DEVICES_PREFIX)})
    if not named:
        return {MEASURE_RESOURCE: 1}
    need = devices_resource(devices)
    if need not in named:
        have = "; ".join(_devices_typed(k) for k in named)
        raise UsageError(f"no measuring machine of the cluster has the devices {','.join(devices)} "
                         f"(the machines have {have}); pass --devices of one of them, or start a "
                         f"machine that has them with the resource {need!r}")
    return {MEASURE_RESOURCE: 1, need: 1}


def measuring_slots(resources: dict[str, float], timeout_s: float = ANSWER_TIMEOUT_S) -> int:
    """How many measuring actors asking for ``resources`` the alive machines that answer
    within ``timeout_s`` hold at once."""
    import ray

    def holds(r: dict[str, float]) -> int:
        return int(min(r.get(k, 0) / v for k, v in resources.items()))

    nodes = [n for n in ray.nodes() if n.get("Alive") and holds(n["Resources"]) > 0]
    return sum(holds(n["Resources"]) for n in _answering(nodes, timeout_s))


def unsatisfiable(bundles: Sequence[Mapping[str, float]],
                  nodes: Sequence[Mapping[str, float]]) -> tuple[str, str]:
    """Why a placement group of ``bundles`` could never be placed on machines with the
    total resources ``nodes`` (the ``Resources`` of the alive ``ray.nodes()``), as
    (the resource, what is asked and what the machines have, in words); ``("", "")`` when
    it might be. Two things rule it out, whatever else runs: a bundle that no one machine
    holds, and bundles that together ask for more than all the machines have. Ray (and
    Ray Tune) would wait for such a group forever without a word."""
    def most(key: str) -> float:
        return max((n.get(key, 0) for n in nodes), default=0)

    for b in bundles:
        if any(all(n.get(k, 0) >= v for k, v in b.items() if v > 0) for n in nodes):
            continue
        short = [k for k, v in b.items() if v > 0 and most(k) < v]
        if short:
            k = short[0]
            have = f"the most one has is {most(k):g}" if most(k) else "none has it"
            return k, f"{b[k]:g} {k!r} on one machine ({have})"
        return next(iter(b)), (f"{dict(b)} on one machine (each machine lacks part of it)")
    total: dict[str, float] = {}
    for b in bundles:
        for k, v in b.items():
            total[k] = total.get(k, 0) + v
    for k, v in total.items():
        have = sum(n.get(k, 0) for n in nodes)
        if v > 0 and have < v:
            return k, f"{v:g} {k!r} in all (the machines have {have:g})"
    return "", ""


def machines_of(node_ids: Sequence[Optional[str]]) -> tuple[dict[str, int], list[str]]:
    """Which machines made the measurements whose Ray node ids are ``node_ids`` (one
    per measurement, None for one made outside Ray): the measurements per machine,
    and the machines among them the cluster no longer lists as alive (they left
    during the run). A machine is named by its address (a machine whose Ray was
    restarted is one machine), or by its address and the start of its node id where
    several alive nodes share one address (raylets of one machine)."""
    import ray

    info = {n["NodeID"]: n for n in ray.nodes()} if ray.is_initialized() else {}
    shared = Counter(n.get("NodeManagerAddress") for n in info.values() if n.get("Alive"))

    def name(node: str) -> str:
        address = (info.get(node) or {}).get("NodeManagerAddress")
        if address is None:
            return node[:8]
        return address if shared[address] <= 1 else f"{address}/{node[:6]}"

    ids = [i for i in node_ids if i]
    counts = Counter(name(i) for i in ids)
    left = sorted({name(i) for i in set(ids) if i in info and not info[i].get("Alive")})
    return dict(sorted(counts.items())), left
