"""Measuring outside the training loop, on a measuring machine: baselines and the final re-measurement.

A run's placements are timed by its EnvRunners on the machines that advertise
a measuring slot. The figures they are compared with must be timed the same
way: single devices, the backend's own baselines (OpenVINO AUTO), the exact solver's placement, and at the
end the best placements again. :class:`MeasuringService` holds a placement
environment's measuring half (the graph and the backend, no store); with a
real backend :func:`measuring_service` starts it as a Ray actor that takes a
measuring slot, so it runs on a measuring machine and never while an
EnvRunner of the run times something there (the run starts it before its
EnvRunners and after they stopped).

**Re-measurement** (:meth:`MeasuringService.remeasure`). One noisy timing per
placement and the minimum over hundreds of them is biased low against
baselines timed once. So a run's result is re-timed: the best few placements
the method measured and every baseline are timed again, ``rounds`` times
each, interleaved (round ``r`` times every candidate once, in an order rotated
from round to round), so slow drifts of a shared machine hit all candidates
alike; each candidate's figure is the median of its rounds (each round itself
the median of ``TimingConfig.repeats`` blocks), with the relative spread of
the rounds: their interquartile range over the median, the statistic of a
single measurement's spread (:func:`envs.base.summarize_times`), and their
``(max - min) / median`` as ``range``. On a shared machine a whole round is
sometimes slowed by half or more (measured: one round in eight on ResNet-50),
which the median of five rounds and the interquartile spread shrug off and the
range of three does not.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from envs.base import summarize_times
from envs.intervals import half_width, interval_fields

__all__ = ["MeasuringService", "measuring_service", "remeasure"]

Candidate = Union[Sequence[int], str]


def _node_id() -> Optional[str]:
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    except Exception:  # noqa: BLE001 - outside a Ray worker there is no node
        return None


class MeasuringService:
    """The measuring half of a placement environment.

    ``tracked=False`` (baselines, re-measurement): no cache and not the run's
    store, so nothing measured here counts as the method's. ``tracked=True``
    (a search method's measurements): through the run's store like an
    EnvRunner's (:meth:`measure_batch`).
    """

    def __init__(self, env_config: Mapping[str, Any], tracked: bool = False) -> None:
        from envs.placement_env import EnvConfig, PlacementEnv

        cfg = dict(env_config)
        if not tracked:
            cfg["store"] = ""  # measurements made here are never the method's
        self.env = PlacementEnv(EnvConfig.from_dict(cfg))

    def measure_batch(self, placements: Sequence[Sequence[int]], suggested: bool = False) -> list[float]:
        """Measure placements the method proposed (``suggested``: the guide proposed),
        through the run's store (cached, counted); return the latency each is rewarded as
        (a failure's is the environment's failure latency)."""
        out = []
        for p in placements:
            m, _ = self.env.measure_array(np.asarray(p, dtype=np.int64), suggested=suggested)
            out.append(self.env.reward_latency(m))
        return out

    def node(self) -> Optional[str]:
        """The Ray node this service measures on."""
        return _node_id()

    def single_devices(self) -> dict[str, float]:
        """Latency of the whole model on each device (``inf`` when it does not run)."""
        return dict(self.env.single_device_s)

    def reference(self) -> dict[str, Any]:
        return {"reference_s": self.env.reference_s, "reference_kind": self.env.reference_kind}

    def own_baselines(self) -> dict[str, Any]:
        """The backend's own idea of a split, by name (the torch backend: Hugging Face
        Accelerate's ``device_map="auto"``; OpenVINO's: its AUTO device and HETERO's own
        splits): a placement (device index per node), an :class:`envs.base.OwnRun` the
        backend times itself by name, or the sentence why it cannot be made. Empty for a
        backend without one."""
        from envs.base import OwnRun

        return {k: (v if isinstance(v, (str, OwnRun)) else [int(d) for d in v])
                for k, v in self.env.backend.own_baselines().items()}

    def measure(self, candidate: Candidate) -> dict[str, Any]:
        """One timing of a placement (device index per node), or of the backend's own
        baseline of that name (:meth:`envs.base.Backend.measure_own`)."""
        if isinstance(candidate, str):
            m = self.env.backend.measure_own(candidate)
        else:
            m = self.env.measure_untracked(np.asarray(candidate, dtype=np.int64))
        return m.to_dict() | {"node": _node_id()}

    def remeasure(self, candidates: Mapping[str, Candidate], rounds: int = 3) -> dict[str, dict]:
        """Time every candidate ``rounds`` times, interleaved (:func:`remeasure`)."""
        return remeasure(self.measure, candidates, rounds)


def remeasure(measure, candidates: Mapping[str, Any], rounds: int = 3) -> dict[str, dict]:
    """Time every candidate ``rounds`` times with ``measure`` (candidate -> a
    :meth:`Measurement.to_dict`-like dict), interleaved; see the module docstring.

    Returns, per candidate name: ``latency_s`` (median over rounds; ``inf``
    if any round failed), ``spread`` (interquartile range / median of the
    rounds), ``range`` (``(max - min) / median``), ``samples_s`` (each
    round's figure), ``interval_s`` (the 95% interval of the median from every
    round's timed blocks pooled, :mod:`envs.intervals`), ``interval_level``,
    ``half_width`` (half the interval over ``latency_s``), ``ok`` and ``error``; with a
    precision rule (:attr:`envs.base.TimingConfig.precision`), ``precision``: its
    ``target``, the pooled half-width ``reached``, and ``capped`` when a round's time
    cap stopped it short of the target and the pooled interval is still wider.
    """
    names = list(candidates)
    samples: dict[str, list[float]] = {n: [] for n in names}
    pooled: dict[str, list[float]] = {n: [] for n in names}
    errors: dict[str, Optional[str]] = {n: None for n in names}
    capped: dict[str, list] = {n: [] for n in names}
    for r in range(max(1, rounds)):
        order = names[r % len(names):] + names[: r % len(names)] if names else []
        for name in order:
            if errors[name] is not None:
                continue
            m = measure(candidates[name])
            if m["ok"]:
                samples[name].append(float(m["latency_s"]))
                pooled[name] += [float(t) for t in m.get("samples_s") or [m["latency_s"]]]
                rule = (m.get("info") or {}).get("precision")
                if isinstance(rule, dict):
                    capped[name].append(rule)
            else:
                errors[name] = f"{m['stage']}: {m['error']}"
    out = {}
    for name in names:
        s = samples[name]
        if errors[name] is not None or not s:
            out[name] = {"ok": False, "latency_s": math.inf, "spread": None, "range": None,
                         "samples_s": s, "error": errors[name]}
            continue
        med, spread = summarize_times(s)
        fields = interval_fields(pooled[name])
        out[name] = {"ok": True, "latency_s": med, "spread": spread,
                     "range": float((max(s) - min(s)) / med) if med > 0 else 0.0,
                     "samples_s": s, "error": None,
                     "interval_s": fields["interval_s"], "interval_level": fields["interval_level"],
                     "half_width": half_width(med, fields["interval_s"])}
        if capped[name]:  # the rounds' precision rule: the pooled half-width against its target
            rule = capped[name][0]
            reached = out[name]["half_width"]
            out[name]["precision"] = {
                "target": rule["target"], "reached": reached, "cap_s": rule["cap_s"],
                "blocks": len(pooled[name]),
                "capped": any(p["capped"] for p in capped[name]) and reached is not None
                and reached > rule["target"]}
    return out


def measuring_service(env_config: Mapping[str, Any], real: bool,
                      resource: Union[str, Mapping[str, float]], tracked: bool = False):
    """A :class:`MeasuringService`: in this process for the simulator (exact and
    instant), else a Ray actor holding one ``resource`` slot (a measuring
    machine's) and, for a real backend on CUDA devices, the GPUs it measures on
    (:func:`envs.gpus.measuring_gpus`: Ray hides from an actor the GPUs it does
    not hold). Call its methods through :func:`call`."""
    if not real:
        return MeasuringService(env_config, tracked)
    import ray

    from envs.gpus import measuring_gpus

    resources = {resource: 1} if isinstance(resource, str) else dict(resource)
    actor = ray.remote(num_cpus=0, num_gpus=measuring_gpus(env_config),
                       resources=resources)(MeasuringService)
    return actor.remote(env_config, tracked)


def call(service, method: str, *args, **kwargs):
    """Call ``method`` on a service, local or a Ray actor."""
    fn = getattr(service, method)
    if hasattr(fn, "remote"):
        import ray

        return ray.get(fn.remote(*args, **kwargs))
    return fn(*args, **kwargs)


def release(service) -> None:
    """Stop a service started by :func:`measuring_service` (frees its measuring slot)."""
    if hasattr(getattr(service, "measure", None), "remote"):
        import ray

        ray.kill(service)
