"""What a placement environment measures and how it rewards it: :class:`EnvConfig`.

The settings of :class:`envs.placement_env.PlacementEnv` (and of the envs built
on it), checked when read from a mapping, and the reward of a latency
(:func:`reward_of`; the kinds are described in :mod:`envs.placement_env`).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, Mapping, Union, get_args

from envs.backends import BACKENDS, SIMULATOR
from envs.base import TimingConfig
from envs.simulator import Objective
from hsdag_core.coarsening import Coarsening
from hsdag_core.features import FeatureConfig
from hsdag_core.typed_settings import choice_error

__all__ = ["EnvConfig", "REWARDS", "MEMORY_PENALTIES", "TRANSIENT_STAGES", "reward_of",
           "backend_choices", "Reward", "MemoryPenalty"]

Reward = Literal["inverse", "speedup", "neg_log", "neg_sqrt"]
REWARDS: tuple[str, ...] = get_args(Reward)
#: failure stages that say nothing about the placement (measured again when proposed again)
TRANSIENT_STAGES = ("timeout",)
MemoryPenalty = Literal["graded", "flat", "repair"]
MEMORY_PENALTIES: tuple[str, ...] = get_args(MemoryPenalty)


def backend_choices() -> tuple[str, ...]:
    """``--backend``'s choices: ``default`` (a training run picks one) and every registered
    backend (:data:`envs.backends.BACKENDS`)."""
    return ("default",) + tuple(BACKENDS)


#: a field the run fills itself, not a setting of its own (no flag, no YAML key)
_RUN_SETS = {"setting": False}


@dataclass(frozen=True)
class EnvConfig:
    """Where placements are measured and how a measurement becomes a reward.

    It is the ``env`` section of a training run's settings (each setting's help is the
    string under it) and, with the run's own values filled in (the resolved backend,
    devices and profiles, and the fields below), what every measuring actor builds its
    environment from.

    Attributes:
        model: zoo name or model file (the run's ``model``).
        input_shape: static input shape(s) of a dynamic file model (the run's ``input_shape``).
        reward: one of :data:`REWARDS` (the run's ``reward``, or its method's own).
        episode_len: placements per episode (the run's ``episode_len``).
        reference: ``best_single`` (fastest single device) or a device name:
            the latency speedups and the ``speedup`` reward are relative to.
        features: node-feature switches (the run's ``features`` section).
        timing: timing of real measurements (the run's ``timing`` section).
        max_nodes / max_edges: padding of the observation (0 = the graph's size).
        store: name of the run's shared measurement store actor ("" = local).
        measure_reference: measure every single device (the reference of rewards) when
            built; ``False`` for a copy that only describes the graph and devices.
        suggestions: at every step, first measure the placement the run's driver queued
            in the store for this graph, if any (``--refit-every``: refit's proposal), as
            a placement of the run, never screened; off, the store is not asked.
    """

    backend: str = field(default=SIMULATOR, metadata={"choices": backend_choices})
    """``default`` (real OpenVINO devices when the machine has two, else the simulator) or a
    registered backend: ``simulator``, ``auto``, ``hetero``, ``pipeline`` (OpenVINO) or
    ``torch`` (PyTorch devices, NVIDIA GPUs among them)."""
    devices: tuple[str, ...] = ()
    """device names; empty = chosen with the backend."""
    profile: Union[str, dict, None] = None
    """profile JSON: the simulator's costs (empty = record the local CPU and model an
    accelerator); with a real backend, the costs the exact solver's placement is computed
    on before it is measured. The environment receives the profile itself (a mapping)."""
    sim_profile: Union[str, dict, None] = None
    """with --backend simulator, a profile JSON the simulator measures with, playing the
    real machine, while --profile stays what the run knows (node features, the memory
    repair, the start, the exact solver's placement); e.g. a profile whose op times are
    off, to see how a method does when its profile is wrong, as a recorded one is on a real
    machine (empty = the simulator measures with --profile)."""
    objective: Objective = "sequential"
    """what is minimised: sequential (the latency of one inference), throughput (a
    pipeline's time per sample: the simulator and the torch backend measure it), parallel
    (independent stages at once: the simulator) or latency (Tarnawski et al.'s latency
    model: the simulator)."""
    coarsen: Coarsening = "colocation"
    """graph coarsening before learning: none, colocation, openvino."""
    failure_factor: float = 10.0
    """a failed placement counts as this many times the reference latency."""
    memory_penalty: MemoryPenalty = "repair"
    """repair (the default: a placement the profile says overflows is not measured; its
    repair, the cheapest set of nodes moved off the full device to one with room, is
    measured and rewarded instead, see hsdag_core/fit.py; without a profile of every
    device, graded), graded (a placement over a device's memory counts as failure_factor x
    (1 + the fraction it is over) times the reference, so a batch that all overflows still
    says which placements are closer to fitting), or flat."""
    incumbent: bool = False
    """the run's best placement so far (or the fastest single device, until a measured
    placement beats it) becomes node features (one-hot device, refreshed at every
    episode's start), so the policy can learn to place relative to it (see
    envs/placement_env.py)."""
    incumbent_share: float = 1.0
    """the share of episodes that see the incumbent; the others are sampled without it
    (with incumbent_prior: from the policy's own logits), so a run settled around its
    incumbent still wanders (1 = every episode)."""
    screen: float = 0.0
    """0 (off), or do not measure a new placement the run's latency model (the profile
    refitted to the run's measurements, as --method refit fits it) says is slower than the
    run's best by more than this many standard deviations of the prediction; such a
    placement is rewarded as predicted and counted as screened, not measured (needs a
    profile of every device and the sequential objective; not with --method refit, which
    proposes the model's own optimum)."""
    sim_delay_s: float = 0.0
    """with the simulator, seconds every measurement takes, as on a real device (0 =
    instant); above 0 the run measures on measuring machines as a real one does (scaling
    benchmarks, multi-machine tests)."""
    model: str = field(default="resnet50", metadata=_RUN_SETS)
    input_shape: str = field(default="", metadata=_RUN_SETS)
    reward: Reward = field(default="inverse", metadata=_RUN_SETS)
    episode_len: int = field(default=20, metadata=_RUN_SETS)
    reference: str = field(default="best_single", metadata=_RUN_SETS)
    features: FeatureConfig = field(default_factory=FeatureConfig, metadata=_RUN_SETS)
    timing: TimingConfig = field(default_factory=TimingConfig, metadata=_RUN_SETS)
    max_nodes: int = field(default=0, metadata=_RUN_SETS)
    max_edges: int = field(default=0, metadata=_RUN_SETS)
    store: str = field(default="", metadata=_RUN_SETS)
    measure_reference: bool = field(default=True, metadata=_RUN_SETS)
    suggestions: bool = field(default=False, metadata=_RUN_SETS)

    def range_error(self) -> str:
        """What is wrong with a value that no type can say, in one sentence ("" when
        nothing): the ranges of the numbers."""
        checks = (
            (self.episode_len >= 1, "episode_len must be at least 1"),
            (0 < self.incumbent_share <= 1, "incumbent_share must be above 0 and at most 1"),
            (self.screen >= 0, "screen must be 0 (off) or a number of standard deviations"),
            (self.sim_delay_s >= 0, "sim_delay_s must be 0 or more"),
            (self.failure_factor > 0, "failure_factor must be positive"),
        )
        return next((why for ok, why in checks if not ok), "")

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
        why = cfg.range_error()
        why = why or choice_error(cls, cfg)
        if not why and cfg.sim_profile is not None and getattr(BACKENDS.get(cfg.backend), "real", False):
            why = ("sim_profile is what a simulated backend (the simulator) measures with; "
                   f"the {cfg.backend} backend measures a real machine")
        if why:
            raise ValueError(why)
        return cfg

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def reward_of(latency_s: float, reward: str, reference_s: float) -> float:
    """The reward of a placement of latency ``latency_s`` under the run's ``reward``
    (:data:`REWARDS`)."""
    if reward == "inverse":
        return 1.0 / latency_s
    if reward == "speedup":
        return reference_s / latency_s
    if reward == "neg_log":
        return -math.log(latency_s)
    if reward == "neg_sqrt":
        return -math.sqrt(latency_s)
    raise ValueError(f"unknown reward {reward!r}; choose one of {', '.join(REWARDS)}")
