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


def _alive_resources() -> list[dict[str, float]]:
    import ray

    return [n["Resources"] for n in ray.nodes() if n.get("Alive")]


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


def measuring_slots(resources: dict[str, float]) -> int:
    """How many measuring actors asking for ``resources`` the alive machines hold at once."""
    return sum(int(min(r.get(k, 0) / v for k, v in resources.items())) for r in _alive_resources())
