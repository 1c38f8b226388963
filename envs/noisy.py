"""The simulator with timing noise: placements timed as on a real machine, from seeded draws.

:class:`NoisySimulatorBackend` answers a placement as a real backend does (warm-up,
timed blocks, racing against the best so far, blocks until the precision or the cap:
:func:`envs.timing.time_runs`), but each run takes the simulator's latency of the
placement times a seeded noise draw, on a simulated clock, so no time passes. A run's
noise is lognormal with median 1 (``sigma``: its spread), and with probability
``slow_p`` the run is also slowed by ``slow`` (a busy moment of a shared machine): the
median of a run is then about the simulator's latency, and every interval of the median
can be checked against it. What racing and the precision rule decide, what they cost
in runs and seconds, and how often an interval covers the true median are measured on
it with known answers and no machine noise.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from envs.base import Measurement, TimingConfig, summarize_times
from envs.simulator import SimulatorBackend
from envs.timing import StageFailure, time_runs
from hsdag_core.costgraph import CostGraph

__all__ = ["NoisySimulatorBackend", "NoisyRunner"]


class NoisyRunner:
    """A runner whose runs take ``latency_s`` times a noise draw on its own ``clock``."""

    def __init__(self, latency_s: float, rng: np.random.Generator, sigma: float,
                 slow_p: float = 0.0, slow: float = 0.0) -> None:
        self.latency_s, self.rng, self.sigma = latency_s, rng, sigma
        self.slow_p, self.slow = slow_p, slow
        self.now = 0.0

    def clock(self) -> float:
        """Simulated seconds since the runner was made."""
        return self.now

    def infer(self) -> None:
        t = self.latency_s * self.rng.lognormal(0.0, self.sigma)
        if self.slow_p and self.rng.random() < self.slow_p:
            t *= 1.0 + self.slow
        self.now += t


class NoisySimulatorBackend(SimulatorBackend):
    """The simulator's latencies timed with seeded noise (module docstring).

    Args:
        graph: the cost graph the simulator evaluates.
        timing: warm-up, blocks, precision, cap and racing, as a real backend's.
        sigma: the spread of a run's lognormal noise (``0.05``: about 5%).
        slow_p, slow: the chance of a run slowed by a busy moment, and by how much.
        seed: the noise draws' seed.
    """

    simulated = False  # its latencies are noisy timings, not exact figures
    races = True

    def __init__(self, graph: CostGraph, timing: TimingConfig = TimingConfig(), sigma: float = 0.05,
                 slow_p: float = 0.0, slow: float = 0.0, seed: int = 0,
                 objective: str = "sequential") -> None:
        super().__init__(graph, objective)
        self.timing, self.sigma, self.slow_p, self.slow = timing, sigma, slow_p, slow
        self.rng = np.random.default_rng(seed)
        self.name = f"simulator/{objective}/noisy"
        self._race_best: Optional[float] = None

    def measure_array(self, placement: np.ndarray, race: bool = False) -> Measurement:
        exact = super().measure_array(placement)
        if not exact.ok:
            return exact
        runner = NoisyRunner(exact.latency_s, self.rng, self.sigma, self.slow_p, self.slow)
        info: dict[str, object] = {"exact_s": exact.latency_s}
        best = self._race_best if race else None
        try:
            samples = time_runs(runner, self.timing, 0, self.timing.timeout_s, info, best)
        except StageFailure as f:
            return Measurement.failure(self.name, f.stage, f.message, **info)
        latency, spread = summarize_times(samples)
        if race and info.get("raced") != "stopped":
            self._race_best = latency if self._race_best is None else min(self._race_best, latency)
        return Measurement(ok=True, latency_s=latency, spread=spread if math.isfinite(spread) else 0.0,
                           runs=len(samples), backend=self.name, samples_s=list(samples), info=info)
