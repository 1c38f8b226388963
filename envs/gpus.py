"""How many GPUs a measuring actor asks Ray for, from the run's devices.

A measuring actor (an EnvRunner, the measuring service) of a real backend on CUDA devices
must hold the GPUs it measures on: Ray makes only the GPUs an actor holds visible to it.
This lives beside the backends (not with the cluster commands) because the measuring
service, part of the environment, asks for them too.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

__all__ = ["gpus_needed", "measuring_gpus"]

_CUDA = re.compile(r"cuda(?::(\d+))?(?::|\Z)", re.IGNORECASE)


def _name(spec: str) -> str:
    """A CUDA spec's device name (``cuda`` and ``cuda:0:mem=2GB`` are ``cuda:0``)."""
    if spec.split(":")[0] == "cuda":
        from envs.pytorch.devices import parse_device

        try:
            return parse_device(spec).name
        except ValueError:
            return spec
    return spec


def gpus_needed(devices: Sequence[str]) -> int:
    """How many GPUs a measuring actor on ``devices`` (names or specs) asks Ray for: one
    more than the highest CUDA index among them (``cuda`` is ``cuda:0``), 0 when none is
    a CUDA device. Ray makes only the GPUs an actor holds visible to it, numbered from 0
    (``CUDA_VISIBLE_DEVICES``), so ``cuda:i`` exists inside the actor only when it holds
    at least ``i + 1`` of them: ``cpu,cuda:0`` needs 1, ``cuda:0,cuda:1`` and
    ``cpu,cuda:1`` need 2."""
    indices = [int(m.group(1) or 0) for m in (_CUDA.match(_name(d)) for d in devices) if m]
    return max(indices) + 1 if indices else 0


def measuring_gpus(env_config: Mapping[str, Any]) -> int:
    """The GPUs each measuring actor of the run described by ``env_config`` (its
    ``backend`` and ``devices``) asks Ray for: :func:`gpus_needed` of its devices when the
    backend measures on real devices, else 0 (a simulator computes, even one that waits
    as long as a real measurement, ``sim_delay_s``)."""
    from envs.backends import BACKENDS

    kind = BACKENDS.get(env_config.get("backend", ""))
    return gpus_needed(env_config.get("devices") or []) if kind is not None and kind.real else 0
