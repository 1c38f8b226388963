"""Which machines of a Ray cluster may measure a run: measuring slots and device sets.

A measuring machine advertises one ``measure_slot`` (one measurement at a
time on it) and, on a cluster of machines with different devices, the set of
devices it has as a custom resource named by :func:`devices_resource` (e.g.
``devices_CPU+GPU``; see ``cluster/config.yaml``). A run with a real backend
asks every measuring actor (EnvRunners, the baselines' and re-measurement's
service, a search's) for both, so it measures only on machines that have its
devices. A cluster where no machine names its devices is taken as uniform:
then a slot is all a run asks for.
"""
from __future__ import annotations

from typing import Sequence

from hsdag_ray.cli import UsageError
from hsdag_ray.config import MEASURE_RESOURCE

__all__ = ["DEVICES_PREFIX", "devices_resource", "measuring_resources", "measuring_slots"]

#: prefix of the custom resource that names a machine's device set
DEVICES_PREFIX = "devices_"


def devices_resource(devices: Sequence[str]) -> str:
    """The resource a machine with exactly ``devices`` advertises (order does not matter;
    Ray refuses ``,`` and ``:`` in resource names, so the names are joined by ``+``)."""
    return DEVICES_PREFIX + "+".join(sorted(devices))


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
        have = ", ".join(k[len(DEVICES_PREFIX):].replace("+", ",") for k in named)
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
