"""What a run is compared with: single devices, the backend's own splits, OpenVINO AUTO and
HETERO's own splits, the exact optimum (or a heuristic's placement on the profile).

:class:`Baselines` holds the figures and the placement each was measured with, so the
run's end can time them again next to the run's best; an optimum whose solver stopped
at its time limit is kept with ``proven: False`` and its gap, and every table marks
ratios against it as such. :func:`hsdag_ray.run.compute_baselines.compute_baselines` measures them.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

__all__ = ["Baselines", "single_devices", "profile_costs"]


def single_devices(latency_s: dict[str, float]) -> dict[str, float]:
    """Device name -> seconds of everything on it, from figures named like
    :attr:`Baselines.latency_s` (``<DEVICE>_only``)."""
    return {k[: -len("_only")]: v for k, v in latency_s.items() if k.endswith("_only")}


@dataclass
class Baselines:
    """What a run is compared with.

    Attributes:
        latency_s: name (``<DEVICE>_only``, ``accelerate_auto``, ``openvino_auto``, ``hetero_auto``,
            ``hetero_pipeline``, ``optimum``, or ``heft`` for the parallel objective) -> seconds (``inf`` when it did not run).
        candidates: name -> the placement (device index per node) it was measured with,
            or the name of a backend's own baseline it runs whole
            (:class:`envs.base.OwnRun`), for re-measurement.
        optimum: ``method``, ``proven``, ``gap`` and ``profile_value_s`` (the
            solver's value on the profile) of the exact placement; empty when
            no exact solver applies.
        failed: name -> why it did not run (``stage: error``), for the figures that
            are ``inf`` because OpenVINO could not run them (AUTO, HETERO's own splits).
        measured_on: the Ray node that measured them (None for the simulator).
        reference_s / reference_kind: the reference latency of rewards and how
            it was obtained (see :class:`envs.placement_env.PlacementEnv`).
    """

    latency_s: dict[str, float] = field(default_factory=dict)
    candidates: dict[str, Any] = field(default_factory=dict)
    optimum: dict[str, Any] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    measured_on: Optional[str] = None
    reference_s: float = math.nan
    reference_kind: str = ""

    def profile_solution(self) -> Optional[list[int]]:
        """The placement solved on the run's profile: the exact solver's (``optimum``),
        or where none applies the heuristic's (``heft``); None when neither ran."""
        for name in ("optimum", "heft"):
            if isinstance(self.candidates.get(name), list):
                return self.candidates[name]
        return None

    def single_devices(self) -> dict[str, float]:
        """Device name -> seconds of everything on it (:func:`single_devices`)."""
        return single_devices(self.latency_s)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Baselines":
        return cls(**d)


def profile_costs(env):
    """The run's profile as a cost graph of the environment's graph and devices, or None
    when the run has no profile of every one of its devices."""
    from hsdag_core.device_profile import Profile, cost_graph

    if env.config.profile is None:
        return None
    prof = Profile.from_json(env.config.profile)
    if any(d not in prof.devices for d in env.devices):
        return None
    return cost_graph(env.graph, prof, env.devices)
