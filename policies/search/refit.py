"""The exact solver on a profile refitted to the run's measurements (Thompson sampling).

A profile is an estimate of the machine: ops timed alone run at other speeds
inside a compiled graph, and a profile recorded on one machine or under one
load is off on another. Solving it exactly gives a placement that is optimal
for the profile, not for the machine (``bench/bench_learning.py --estimate``
measures how far off). This search keeps the profile as a *prior* and
corrects it with every latency the run measures, then solves again.

The model (:class:`envs.latency_model.LatencyModel`): under the
``sequential`` objective a placement's latency is linear in the profile's
costs (node times, transfers, stage boundaries and a constant), under
``throughput`` it is the bottleneck device's load, linear in them; the profile is
a Gaussian prior over them, and every measurement refits them by Bayesian
linear regression, with the measurements' noise level fitted by marginal
likelihood.

Each proposal is the exact solver's placement (min cut, or the MILP with the
memory limits, or the throughput MILP, :func:`policies.solvers.exact.solve`) on a refitted profile: the
posterior mean while it gives a placement not measured yet (the first one is
the profile's own optimum; where MILP solves must share the proposal's time, a mean
that repeated a measured placement is not solved again in the next proposal, whose time
goes to samples), otherwise posterior samples (Thompson sampling,
Thompson 1933; for combinatorial choices Russo et al., "A Tutorial on
Thompson Sampling", 2018) drawn with a narrowed spread (:data:`SAMPLE_SPREAD`): of up
to :data:`CANDIDATES` of their placements not measured yet, the one of most expected
improvement over the best measured latency under the posterior (Jones et al. 1998), so
a measurement goes to a placement that may beat the best, and of two that may, to the
one the model knows least. While every sample repeats a measured placement, samples
are drawn again with a wider spread, and a change of the best measured placement (one
node, then more) is proposed when every draw does. Memory is known exactly, so every proposal fits.

Where the exact solver is the MILP, a proposal's planning is bounded by ``time_limit``
(1 s by default): the first proposal's one solve takes all of it, each later one's
solves share it, each given at least :data:`ROUND_NEED` times what the last LP
relaxation took, so that it gets to round one; each solve starts from the incumbent
(the best, under the solve's costs, of the last solve's placement and the measured ones)
and keeps it when HiGHS finds nothing better in its share of the time.
"""
from __future__ import annotations

import time
from typing import Any, Optional

import numpy as np

from envs.latency_model import MODELED_OBJECTIVES, NOISE_FIT_AFTER, NOISE_LEVELS, LatencyModel
from envs.simulator import Simulator
from hsdag_core.costgraph import CostGraph

__all__ = ["ProfileThompson", "NOISE_LEVELS", "NOISE_FIT_AFTER"]

#: random changes of the best placement tried when every posterior draw repeats one
#: (20 of one node, then 20 of two nodes, and so on)
LOCAL_TRIES = 200
#: seconds a MILP solve gets at least, however little of the proposal's time is left
MIN_SOLVE_S = 0.05
#: share of a proposal's time handed out as the MILP solves' time limits (HiGHS checks
#: its limit between steps, and building each model takes time besides)
PLAN_SHARE = 0.6
#: posterior samples solved per proposal once the posterior mean's placement is measured;
#: the one of most expected improvement is proposed
CANDIDATES = 6
#: the prior's spread a proposal's first posterior samples are drawn with (each repeat of a
#: measured placement widens it 1.5x): the posterior's own spread lets a sample move the
#: costs of nodes no measurement constrains by half their value, which in the first
#: measurements gives placements far off the posterior's optimum; a narrower draw gives
#: placements near it that differ where the model is least sure
SAMPLE_SPREAD = 0.6
#: a MILP solve is given at least this many times the seconds its last LP relaxation took
#: (while the proposal's time lasts): a solve stopped before its relaxation is rounded
#: returns its start, a placement already measured, so two half-shares that each stop
#: there teach nothing where one whole share gives a new placement
ROUND_NEED = 2.0
#: measured placements considered for the MILP's start: this many fastest and latest
INCUMBENT_CANDIDATES = 10
#: seconds of planning per proposal where the exact solver is the MILP, when the search is
#: not given ``time_limit`` (``bench/bench_first_ten.py --refit-plan-s`` varies it)
PLAN_SECONDS = 1.0
#: the prior spread of each device's shared factor of its times
#: (:class:`envs.latency_model.LatencyModel`'s ``device_scale``; 0: none)
DEVICE_SCALE = 0.0


def expected_improvement(mean: float, std: float, best: float) -> float:
    """How much a latency of posterior ``mean`` and ``std`` is expected to beat ``best``
    (Jones et al. 1998); the mean's own improvement where the model is sure of it."""
    from scipy.stats import norm

    if not np.isfinite(best):
        return -mean
    if std <= 0:
        return max(best - mean, 0.0)
    z = (best - mean) / std
    return float((best - mean) * norm.cdf(z) + std * norm.pdf(z))


class ProfileThompson:
    """Thompson sampling over the exact solver (see the module docstring).

    Args:
        num_nodes / num_devices: the problem's size (those of ``costs``).
        budget: placements the search may propose (unused: every proposal is chosen alike).
        seed: random seed of the posterior samples.
        start: unused (the first proposal is the profile's own optimum).
        costs: the run's profile as a cost graph of its (coarsened) graph.
        objective: ``sequential`` (linear in the costs) or ``throughput`` (the largest
            of the devices' loads, each linear in them; :mod:`envs.latency_model`).
        sigma: the prior's relative spread of each cost (0.5: a node's time is
            trusted to about half its value).
        noise: a measurement's noise, relative to its latency, until the search fits
            its own from :data:`NOISE_FIT_AFTER` measurements on.
        time_limit: seconds of planning per proposal where the exact solver is the MILP
            (memory limits, or the throughput objective; :data:`PLAN_SECONDS` when None):
            the first proposal's one solve may take :data:`PLAN_SHARE` of them, a later
            proposal's first solve half of that, each further one half of what is left (at
            least :data:`ROUND_NEED` times the last relaxation's seconds, while they last), and
            no further posterior sample is solved once too little is left. Each MILP starts from the
            incumbent, the best under the solve's costs of the last solve's placement and
            the measured ones, and returns it when it finds none better in its time.
        retries: posterior samples drawn per proposal before changing the best measured placement instead.
        device_scale: the prior spread of a factor shared by each device's times
            (:data:`DEVICE_SCALE` when None; :class:`envs.latency_model.LatencyModel`).
    """

    def __init__(self, num_nodes: int, num_devices: int, budget: int, seed: int = 0,
                 start: Optional[np.ndarray] = None, *, costs: CostGraph,
                 objective: str = "sequential", sigma: float = 0.5, noise: float = 0.02,
                 time_limit: Optional[float] = None, retries: int = 4,
                 candidates: int = CANDIDATES, device_scale: Optional[float] = None) -> None:
        from policies.solvers.exact import exact_method

        if objective not in MODELED_OBJECTIVES:
            raise ValueError(f"the profile refit models the {' and '.join(MODELED_OBJECTIVES)} "
                             f"objectives, not {objective!r}")
        if costs.num_nodes != num_nodes or costs.num_devices != num_devices:
            raise ValueError(f"the cost graph has {costs.num_nodes} nodes on {costs.num_devices} "
                             f"devices, the run {num_nodes} on {num_devices}")
        self.costs, self.objective = costs, objective
        self.solver = exact_method(costs, objective)
        scale = DEVICE_SCALE if device_scale is None else device_scale
        self.model = LatencyModel(costs, sigma=sigma, noise=noise, objective=objective,
                                  device_scale=scale)
        self.sim, self.free = self.model.sim, self.model.free
        self.rng = np.random.default_rng(seed)
        self.time_limit = PLAN_SECONDS if time_limit is None else time_limit
        self.retries, self.candidates = retries, candidates
        self.spread = SAMPLE_SPREAD
        self.seen: set[bytes] = set()
        self.proposals = {"mean": 0, "sample": 0, "local": 0}
        self._last: Optional[np.ndarray] = None  # the last solve's placement
        self._deadline = 0.0
        self._need = 0.0  # seconds a MILP solve needs to round its relaxation (ROUND_NEED)
        self._skip_mean = False  # the last posterior mean repeated a measured placement

    @property
    def placements(self) -> list[np.ndarray]:
        return self.model.placements

    @property
    def latencies(self) -> list[float]:
        return self.model.latencies

    def noise_level(self) -> float:
        """The measurements' relative noise the model fitted (:meth:`LatencyModel.noise_level`)."""
        return self.model.noise_level()

    def _placement(self, theta: np.ndarray, share: float = 0.5) -> Optional[np.ndarray]:
        from policies.solvers.exact import solve

        costs = self.model.refitted(theta)
        options: dict[str, Any] = {}
        limit = None
        if self.solver == "milp":
            left = self._deadline - time.perf_counter()
            limit = max(share * left, min(left, self._need), MIN_SOLVE_S)
            options["start"] = self._incumbent(costs)
        res = solve(costs, self.objective, self.solver, time_limit=limit, **options)
        lp_s = res.info.get("lp_s")
        if lp_s is not None:   # a short MILP solve rounds its relaxation: what that took
            self._need = ROUND_NEED * lp_s if np.isfinite(lp_s) else max(self._need, 2 * limit)
        if not res.feasible:
            return None
        self._last = np.asarray(res.placement, dtype=np.int64)
        return self._last

    def _incumbent(self, costs: CostGraph) -> Optional[np.ndarray]:
        """The best under ``costs`` of the last solve's placement and the measured ones (the
        :data:`INCUMBENT_CANDIDATES` fastest measured and as many of the latest)."""
        cands = [] if self._last is None else [self._last]
        order = np.argsort(self.latencies)
        picked = set(order[:INCUMBENT_CANDIDATES].tolist())
        picked |= set(range(max(len(self.latencies) - INCUMBENT_CANDIDATES, 0), len(self.latencies)))
        cands += [self.placements[i] for i in sorted(picked)]
        sim = Simulator(costs)
        best, best_v = None, np.inf
        for p in cands:
            r = sim.evaluate(p, self.objective)
            if r.feasible and r.value < best_v:
                best, best_v = p, r.value
        return best

    def _spent(self) -> bool:
        """Whether too little of the proposal's time is left for another MILP solve to give
        more than its start: under two minimal solves, or under what rounding needs."""
        left = self._deadline - time.perf_counter()
        return self.solver == "milp" and left < max(2 * MIN_SOLVE_S, self._need)

    def _new(self, p: Optional[np.ndarray]) -> bool:
        return p is not None and p.tobytes() not in self.seen

    # --------------------------------------------------------------- protocol
    def propose(self) -> np.ndarray:
        self._deadline = time.perf_counter() + PLAN_SHARE * self.time_limit
        # the first proposal is the model's optimum after the single devices: its whole time
        first = not any(self.proposals.values())
        p = None
        if not self._skip_mean:
            p = self._placement(self.model.posterior_mean(), 1.0 if first else 0.5)
            # a mean that repeats a measured placement, where solves must share the time,
            # is skipped next time: the proposal's time goes to posterior samples
            self._skip_mean = self.solver == "milp" and not self._new(p) and self._need > 0
        else:
            self._skip_mean = False
        made_from = "mean"
        spread = self.spread
        if not self._new(p) and self.candidates > 1:
            p, made_from = self._best_sample(), "sample"
        for _ in range(self.retries if not self._new(p) else 0):
            if self._spent():
                break  # the proposal's time is spent: a change of the best placement instead
            prior = self.model.prior_sample(self.rng, spread)
            p = self._placement(self.model.condition(prior, self.rng.standard_normal(len(self.latencies))))
            made_from, spread = "sample", spread * 1.5
            if self._new(p):
                break
        if not self._new(p):
            p, made_from = self._local(), "local"
        self.proposals[made_from] += 1
        self.seen.add(p.tobytes())
        return p

    def _best_sample(self) -> Optional[np.ndarray]:
        """Of up to ``candidates`` posterior samples' placements not measured yet, the one of
        most expected improvement over the best measured latency under the posterior
        (:meth:`LatencyModel.predict`): a sample's placement that the model already knows to
        be slow is not measured, and of two equally promising ones the less known is."""
        best_v = min((v for v in self.latencies if np.isfinite(v)), default=np.inf)
        pick, pick_ei, tried = None, -np.inf, set()
        for _ in range(self.candidates):
            if self._spent():
                break
            prior = self.model.prior_sample(self.rng, self.spread)
            p = self._placement(self.model.condition(prior, self.rng.standard_normal(len(self.latencies))))
            if not self._new(p) or p.tobytes() in tried:
                continue
            tried.add(p.tobytes())
            ei = expected_improvement(*self.model.predict(p), best_v)
            if ei > pick_ei:
                pick, pick_ei = p, ei
        return pick

    def _local(self) -> np.ndarray:
        """A change of the best measured placement, not proposed yet and within the memory
        limits: one node moved, or more once the one-node changes are used up."""
        best = (self.placements[int(np.argmin(self.latencies))] if self.latencies
                else np.zeros(self.costs.num_nodes, dtype=np.int64))
        p = best
        for attempt in range(LOCAL_TRIES):
            p = best.copy()
            for i in self.rng.choice(p.size, size=min(p.size, 1 + attempt // 20), replace=False):
                choices = [d for d in np.flatnonzero(self.free[i]) if d != p[i]]
                if choices:
                    p[i] = int(self.rng.choice(choices))
            if self._new(p) and self.sim.check(p) is None:
                return p
        return p

    def observe(self, placement: np.ndarray, latency_s: float, proposed: bool = True) -> None:
        """A measured latency. A failed measurement (``inf``) teaches the model nothing, nor
        does one of a placement over a memory limit (what was measured is its repair).
        ``proposed=False``: a measurement the run made before the search (a single device),
        learned from, and still proposed as the search's own when it looks best."""
        p = np.asarray(placement, dtype=np.int64)
        if proposed:
            self.seen.add(p.tobytes())
        self.model.add(p, latency_s)

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state,
                "placements": [p.tolist() for p in self.placements],
                "latencies": self.latencies, "bottlenecks": self.model.bottlenecks(),
                "seen": [np.frombuffer(k, dtype=np.int64).tolist()
                                                      for k in self.seen],
                "proposals": self.proposals}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.model.replace(state["placements"], state["latencies"], state.get("bottlenecks"))
        self.seen = {np.asarray(p, dtype=np.int64).tobytes() for p in state["seen"]}
        self.proposals = dict(state["proposals"])
