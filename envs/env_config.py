"""What a placement environment measures and how it rewards it: :class:`EnvConfig`.

The settings of :class:`envs.placement_env.PlacementEnv` (and of the envs built
on it), checked when read from a mapping, and the reward of a latency
(:func:`reward_of`; the kinds are described in :mod:`envs.placement_env`).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping, Optional

from envs.backends import BACKENDS, SIMULATOR
from envs.base import TimingConfig
from hsdag_core.features import FeatureConfig

__all__ = ["EnvConfig", "REWARDS", "MEMORY_PENALTIES", "TRANSIENT_STAGES", "reward_of"]

REWARDS = ("inverse", "speedup", "neg_log", "neg_sqrt")
#: failure stages that say nothing about the placement (measured again when proposed again)
TRANSIENT_STAGES = ("timeout",)
MEMORY_PENALTIES = ("graded", "flat", "repair")


@dataclass
class EnvConfig:
    """What one placement environment measures and how it rewards.

    Attributes:
        model: zoo name or model file.
        coarsen: ``none``, ``colocation`` or ``openvino``.
        backend: ``simulator``, ``auto``, ``hetero`` or ``pipeline``.
        devices: device names (real/virtual OpenVINO devices, or profile devices).
        profile: a profile as a JSON dict (the simulator needs one): what the run knows of
            the devices (cost features, the memory repair, the start) and, without
            ``sim_profile``, the simulator's costs.
        objective: what the backend measures: sequential, throughput or parallel
            (:data:`envs.backends.BackendKind.objectives` says which a backend can).
        reward: one of :data:`REWARDS`.
        episode_len: placements per episode.
        failure_factor: a failed placement is rewarded as this many times the
            reference latency.
        reference: ``best_single`` (fastest single device) or a device name:
            the latency speedups and the ``speedup`` reward are relative to.
        features: node-feature switches (the paper's ablation).
        timing: timing of real measurements.
        max_nodes / max_edges: padding of the observation (0 = the graph's size).
        store: name of the run's shared measurement store actor ("" = local).
        input_shape: static input shape(s) of a dynamic file model (as ``--input-shape``).
        measure_reference: measure every single device (the reference of rewards) when
            built; ``False`` for a copy that only describes the graph and devices.
        memory_penalty: ``repair`` (the default: with a profile of every device, a
            placement over a memory limit is not measured, its repair is measured and
            rewarded instead; graded otherwise), ``graded`` (a placement over a memory
            limit is rewarded by how far over it is) or ``flat`` (like any other failure).
        sim_delay_s: seconds every simulated measurement takes (0 = instant).
        incumbent: ``D`` more node features, the one-hot device of each node in the
            run's best placement so far (the fastest single device, measured as the
            reference, until a measured placement beats it), refreshed at
            every episode's start, so a policy can place relative to it. Off by
            default: it helps some graphs and hurts memory-limited ones
            (docs/results/learning.md, "Exploration options").
        incumbent_share: with ``incumbent``, the share of episodes that see it; the
            others see zero incumbent features, so a policy leaning on it
            (HSDAG's ``incumbent_prior``) samples them from its own logits alone.
        sim_profile: with the simulator backend, the profile it measures with instead of
            ``profile`` (the machine the simulator plays, when the run's profile of it is off).
        screen: 0 (off), or leave unmeasured a new placement whose latency, as the run's
            latency model predicts it less this many of its standard deviations, is
            still slower than the run's best (:mod:`envs.screen`; needs a profile of
            every device and the sequential objective).
        suggestions: at every step, first measure the placement the run's driver queued
            in the store for this graph, if any (``--refit-every``: refit's proposal), as
            a placement of the run, never screened; off, the store is not asked.
    """

    model: str = "resnet50"
    coarsen: str = "colocation"
    backend: str = SIMULATOR
    devices: tuple[str, ...] = ()
    profile: Optional[dict] = None
    objective: str = "sequential"
    reward: str = "inverse"
    episode_len: int = 20
    failure_factor: float = 10.0
    reference: str = "best_single"
    features: FeatureConfig = field(default_factory=FeatureConfig)
    timing: TimingConfig = field(default_factory=TimingConfig)
    max_nodes: int = 0
    max_edges: int = 0
    store: str = ""
    input_shape: str = ""
    measure_reference: bool = True
    memory_penalty: str = "repair"
    sim_delay_s: float = 0.0
    incumbent: bool = False
    incumbent_share: float = 1.0
    sim_profile: Optional[dict] = None
    screen: float = 0.0
    suggestions: bool = False

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "EnvConfig":
        if isinstance(d, EnvConfig):
            return d
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown environment setting(s) {', '.join(unknown)}")
        kw = dict(d)
        if isinstance(kw.get("features"), Mapping):
            kw["features"] = FeatureConfig(**kw["features"])
        if isinstance(kw.get("timing"), Mapping):
            kw["timing"] = TimingConfig(**kw["timing"])
        if "devices" in kw:
            kw["devices"] = tuple(kw["devices"])
        cfg = cls(**kw)
        if cfg.reward not in REWARDS:
            raise ValueError(f"unknown reward {cfg.reward!r}; choose one of {', '.join(REWARDS)}")
        if cfg.episode_len < 1:
            raise ValueError("episode_len must be at least 1")
        if cfg.sim_profile is not None and getattr(BACKENDS.get(cfg.backend), "real", False):
            raise ValueError("sim_profile is what a simulated backend measures with; "
                             f"the {cfg.backend} backend measures a real machine")
        if not 0 < cfg.incumbent_share <= 1:
            raise ValueError("incumbent_share must be above 0 and at most 1")
        if cfg.memory_penalty not in MEMORY_PENALTIES:
            raise ValueError(f"unknown memory_penalty {cfg.memory_penalty!r}; choose one of "
                             f"{', '.join(MEMORY_PENALTIES)}")
        return cfg

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def reward_of(latency_s: float, kind: str, reference_s: float) -> float:
    """The reward of a placement of latency ``latency_s``."""
    if kind == "inverse":
        return 1.0 / latency_s
    if kind == "speedup":
        return reference_s / latency_s
    if kind == "neg_log":
        return -math.log(latency_s)
    if kind == "neg_sqrt":
        return -math.sqrt(latency_s)
    raise ValueError(f"unknown reward {kind!r}; choose one of {', '.join(REWARDS)}")
