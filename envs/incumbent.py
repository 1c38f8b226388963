"""The placement a policy samples around (the ``incumbent`` node features of
:class:`envs.placement_env.PlacementEnv`, which HSDAG's ``incumbent_prior`` leans on).

It is the run's best placement so far, except where the run has measured better:

* while a single device, measured as the reward's reference, is faster than the
  run's best, it is that single device;
* before anything is measured, :func:`start_placement`: with a profile of every
  device, the single-device placement repaired to fit memory that the profile
  estimates fastest, so a run with a small accelerator starts from as much on the
  accelerator as fits instead of from the CPU alone (how close that start is to
  the optimum: docs/results/design-choices.md).

Without this a policy has nothing to sample around until its own first placements
are measured, and those, drawn with no prior, are far from every good one.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional, Sequence

import numpy as np

__all__ = ["incumbent", "start_placement", "START_REPAIR_S"]

#: seconds the repair of a single-device start may search (once per run, against 2 s per
#: proposal): on MobileBERT (389 nodes, 64 MB accelerator) 2 s stopped 5.8% above the
#: optimum, the search proved its cheapest set in 9 s
START_REPAIR_S = 30.0


def _fastest_single(num_nodes: int, devices: Sequence[str], single_device_s: Mapping[str, float]
                    ) -> Optional[tuple[float, np.ndarray]]:
    """The fastest single device measured: ``(latency, everything on it)``, or None."""
    ran = {d: s for d, s in single_device_s.items() if math.isfinite(s)}
    if not ran:
        return None
    name = min(ran, key=ran.get)
    return ran[name], np.full(num_nodes, list(devices).index(name), dtype=np.int64)


def start_placement(num_nodes: int, devices: Sequence[str], single_device_s: Mapping[str, float],
                    limits: Any = None) -> Optional[np.ndarray]:
    """Where sampling starts before anything is measured.

    ``limits``: the cost graph of the run's devices under a profile (memory sizes and
    op times), when every device is profiled and over-memory placements are repaired:
    then each single-device placement is repaired (:func:`hsdag_core.fit.repair`,
    given :data:`START_REPAIR_S` to search) and the one the simulator estimates
    fastest is the start. Otherwise the fastest
    single device measured, or None when none ran."""
    if limits is not None:
        from envs.simulator import Simulator
        from hsdag_core.fit import repair

        sim, fits = Simulator(limits), []
        for d in range(len(devices)):
            p = repair(limits, np.full(num_nodes, d, dtype=np.int64), time_limit=START_REPAIR_S)
            if p is not None:
                fits.append((sim.sequential(p).value, d, p))
        if fits:
            return min(fits, key=lambda f: (f[0], f[1]))[2]
    fastest = _fastest_single(num_nodes, devices, single_device_s)
    return None if fastest is None else fastest[1]


def incumbent(best: Optional[Mapping[str, Any]], start: Optional[np.ndarray],
              devices: Sequence[str], single_device_s: Mapping[str, float],
              num_nodes: int) -> Optional[np.ndarray]:
    """The incumbent: ``best`` (the store's best of this graph: ``latency_s`` and
    ``placement``), or the fastest single device measured when it is faster, or
    ``start`` when nothing is measured yet."""
    if best is None:
        return start
    fastest = _fastest_single(num_nodes, devices, single_device_s)
    if fastest is not None and fastest[0] < best["latency_s"]:
        return fastest[1]
    return np.asarray(best["placement"], dtype=np.int64)[:num_nodes]
