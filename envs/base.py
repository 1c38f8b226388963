"""One interface to measure a placement, whatever measures it.

Every backend (real OpenVINO HETERO, the OpenVINO stage pipeline, the
simulator) answers :meth:`Backend.measure` with a :class:`Measurement`: latency
statistics when the placement ran, or a structured failure saying what failed
and why. A backend never raises for a placement that cannot compile or run.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Mapping, Optional

import numpy as np

__all__ = ["Measurement", "Backend", "OwnRun", "TimingConfig", "summarize_times"]


@dataclass(frozen=True)
class TimingConfig:
    """How a real backend times a compiled placement.

    Attributes:
        warmup: untimed runs after compiling.
        warmup_agree: unraced (a baseline, a re-measurement), after ``warmup`` runs warm up further until two consecutive runs
            agree within this relative difference (``0`` = the fixed ``warmup`` only), at
            most ``warmup_max`` runs in all: caches, allocators and clocks settle before
            anything is timed.
        warmup_max: the most warm-up runs ``warmup_agree`` may take.
        repeats: the fewest timed blocks; the reported latency is the median over
            blocks. With ``precision`` above 0, blocks are added until the 95
            percent interval of the median is within ``precision`` of it (or the cap stops
            them); with ``precision`` 0, exactly ``repeats`` blocks are timed.
        block: runs per timed block (a block's mean is one sample); larger
            blocks smooth scheduler noise on a shared machine.
        block_s: the seconds a timed block aims at: where the last warm-up run took more
            than ``block_s / block``, a block holds ``round(block_s / run)`` runs (at
            least 1), so a model whose run takes more than 100 ms is timed in blocks of one
            run, more of them within ``precision_cap_s``. The machine's speed drifts in
            spells, and the shorter the call, the more often its blocks fall within one
            (docs/results/real-devices.md). ``0`` = always ``block`` runs.
        precision: the target half-width of the 95 percent interval of the median
            over the median (``0.02``: within 2 percent); timed blocks go on until it is
            reached (:func:`envs.racing.race_step`). A placement raced against
            the best so far stops sooner once its interval lies above the best.
            ``0`` = a fixed ``repeats`` blocks.
        precision_cap_s: the most seconds of timed blocks per placement spent
            reaching ``precision``; past it the timing ends and its result says
            that the cap stopped it and what precision it reached.
        timeout_s: a measurement (compile + runs) taking longer fails with
            ``stage="timeout"``.
        threads: inference threads per device (``0`` = the plugin's default).
        validate_outputs: compare outputs with the unsplit model's once.
        race: when a method's placement is measured against the best so far,
            stop timing it once it is clearly slower, and time it longer when
            it claims a new best by a small margin (:mod:`envs.racing`);
            baselines and re-measurements are always timed in full.
        race_margin: relative margin of "clearly slower" and "small margin".
        race_min_blocks: blocks timed before a placement may be stopped (its
            last warm-up run must be slow too).
        race_settle: blocks after which a placement whose fastest block is
            still slower than the best is finished with their median (it
            cannot claim the best; ``0`` = time every planned block).
        race_extra: with ``precision`` 0, a close new best is timed up to this
            many times the planned blocks again.
        race_far: a placement whose last warm-up run already took more than
            ``race_far`` times the best latency is not timed further (its
            warm-up run is its latency); ``0`` = time at least
            ``race_min_blocks`` blocks whatever the warm-up showed.
        stage_cache: compiled pipeline stages (and single-device models) kept
            between placements, so shared stages compile once (0 = off).
        stage_cache_mb: memory bound of that cache, in MB (an estimate: the
            stages' constants and outputs).
    """

    warmup: int = 2
    warmup_agree: float = 0.05
    warmup_max: int = 6
    repeats: int = 7
    block: int = 3
    block_s: float = 0.15
    precision: float = 0.02
    precision_cap_s: float = 15.0
    timeout_s: float = 120.0
    threads: int = 1
    validate_outputs: bool = False
    race: bool = True
    race_margin: float = 0.05
    race_min_blocks: int = 1
    race_settle: int = 3
    race_extra: int = 1
    race_far: float = 2.0
    stage_cache: int = 64
    stage_cache_mb: float = 1024.0

    def __post_init__(self) -> None:
        """Refuse values no timing can have (a :class:`ValueError`, one sentence each)."""
        checks = (
            (self.repeats >= 1 and self.block >= 1, "repeats and block must be at least 1"),
            (self.block_s >= 0, "block_s must be 0 (always block runs) or a positive number of seconds"),
            (self.warmup >= 0 and self.threads >= 0, "warmup and threads must be 0 or more"),
            (self.timeout_s > 0, "timeout_s must be a positive number of seconds"),
            (0 <= self.precision < 1 and self.precision_cap_s > 0,
             "precision must be a fraction from 0 to below 1 (0.02: +/-2%; 0: exactly repeats "
             "blocks) and precision_cap_s a positive number of seconds"),
        )
        for ok, why in checks:
            if not ok:
                raise ValueError(why)


@dataclass
class Measurement:
    """The result of measuring one placement.

    ``ok`` is True when the placement compiled and ran; then ``latency_s`` is
    the median time of one inference, ``spread`` the relative spread
    (interquartile range / median) of the timed samples, and ``interval_s`` the
    95% confidence interval ``[low, high]`` of the median (:mod:`envs.intervals`,
    computed from ``samples_s`` when a backend does not give it) with
    ``interval_level`` its coverage (below 0.95 with fewer than 6 samples). When ``ok`` is False,
    ``stage`` says where it failed (``validate``, ``compile``, ``infer``,
    ``timeout``, ``memory``) and ``error`` says why in one sentence.
    """

    ok: bool
    latency_s: float = math.nan
    spread: float = math.nan
    runs: int = 0
    backend: str = ""
    stage: Optional[str] = None
    error: Optional[str] = None
    samples_s: list[float] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    interval_s: Optional[list[float]] = None
    interval_level: Optional[float] = None

    def __post_init__(self) -> None:
        if self.ok and self.interval_s is None and self.samples_s:
            from envs.intervals import median_interval

            low, high, self.interval_level = median_interval(self.samples_s)
            self.interval_s = [low, high]

    @property
    def half_width(self) -> Optional[float]:
        """Half the interval over the median: the timing's relative precision."""
        from envs.intervals import half_width

        return half_width(self.latency_s, self.interval_s) if self.ok else None

    @classmethod
    def failure(cls, backend: str, stage: str, error: str, **info: Any) -> "Measurement":
        return cls(ok=False, backend=backend, stage=stage, error=error, info=dict(info))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("latency_s", "spread"):
            if isinstance(d[k], float) and math.isnan(d[k]):
                d[k] = None
        return d


def summarize_times(samples_s: list[float]) -> tuple[float, float]:
    """Median and relative interquartile spread of timing samples."""
    a = np.asarray(samples_s, dtype=np.float64)
    med = float(np.median(a))
    q1, q3 = np.percentile(a, [25, 75])
    return med, float((q3 - q1) / med) if med > 0 else 0.0


@dataclass(frozen=True)
class OwnRun:
    """An own baseline that is no placement of the graph's nodes: the backend runs the whole
    model its own way (OpenVINO's AUTO device, HETERO's own splits), timed by
    :meth:`Backend.measure_own`; ``label`` names it in a run's log."""

    label: str


class Backend(ABC):
    """What a placement environment measures with: node placements of one graph turned
    into :class:`Measurement` s, never an exception for a placement that cannot run.

    Each backend class declares what it can do:

    * ``simulated``: a cost model computes its latencies (exact, and instant unless
      delayed on purpose), so nothing is re-measured at the end;
    * ``races``: ``measure(..., race=True)`` may stop timing a placement that is clearly
      slower than the best so far (:mod:`envs.racing`); without it ``race`` is
      ignored;
    * ``sim``: a simulated backend's cost model (:class:`envs.simulator.Simulator`), which
      others read for schedules and feasibility; None for a real backend;
    * :meth:`own_baselines`: the split its users would otherwise take (the torch
      backend: Accelerate's ``device_map="auto"``; OpenVINO's: its AUTO device and
      HETERO's own splits), empty when it has none.

    Kinds are registered by name in :mod:`envs.backends`.
    """

    name: str
    devices: list[str]
    simulated: ClassVar[bool] = False
    races: ClassVar[bool] = False
    sim = None

    def own_baselines(self) -> dict[str, object]:
        """The backend's own idea of a split, by name: a placement (device index per node),
        an :class:`OwnRun` (the backend runs the whole model its own way: :meth:`measure_own`),
        or the sentence why it cannot be made. None here."""
        return {}

    def measure_own(self, name: str) -> Measurement:
        """One timing of the own baseline ``name`` that :meth:`own_baselines` gives as an
        :class:`OwnRun`."""
        raise ValueError(f"the {self.name} backend has no own baseline {name!r}")

    @abstractmethod
    def measure(self, placement: Mapping[str, str], race: bool = False) -> Measurement:
        """Measure a placement given as node name -> device name."""

    @abstractmethod
    def measure_array(self, placement: np.ndarray, race: bool = False) -> Measurement:
        """Measure a placement given as one device index (into ``devices``) per node, in
        the graph's node order."""
