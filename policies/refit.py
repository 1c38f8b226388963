"""The exact solver on a profile refitted to the run's measurements (Thompson sampling).

A profile is an estimate of the machine: ops timed alone run at other speeds
inside a compiled graph, and a profile recorded on one machine or under one
load is off on another. Solving it exactly gives a placement that is optimal
for the profile, not for the machine (``bench/bench_learning.py --estimate``
measures how far off). This search keeps the profile as a *prior* and
corrects it with every latency the run measures, then solves again.

Under the ``sequential`` objective a placement's latency is linear in the
unknown costs::

    L(p) = sum_i t[i, p_i] + a * transfer(p) + b * boundaries(p) + c

with ``t[i, d]`` node ``i``'s time on device ``d``, ``transfer(p)`` the
profile's transfer time of ``p``, ``boundaries(p)`` its stage boundaries and
``c`` a constant (a backend's fixed overhead). The prior is independent
Gaussians around the profile: ``t[i, d] ~ N(t0[i, d], (sigma t0[i, d])^2)``,
``a ~ N(1, sigma^2)``, ``b`` around the profile's boundary cost, ``c`` around 0;
each measurement is the linear function plus Gaussian noise, a share of its
size that the search picks by marginal likelihood once it has measurements to
tell (a simulator is deterministic; a machine is not). The posterior is Bayesian linear regression, computed in the
space of the ``M`` measurements (an ``M x M`` solve, so thousands of unknowns
cost nothing), and a posterior sample is drawn by correcting a prior sample
with the same solve (Wilson et al., ICML 2020, "pathwise conditioning").

Each proposal is the exact solver's placement (min cut, or the MILP with the
memory limits, :func:`policies.exact.solve`) on a refitted profile: the
posterior mean while it gives a placement not measured yet (the first one is
the profile's own optimum), otherwise a posterior sample (Thompson sampling,
Thompson 1933; for combinatorial choices Russo et al., "A Tutorial on
Thompson Sampling", 2018), drawn again with a wider spread while it repeats a
measured placement, and a change of the best measured placement (one node,
then more) when every draw does. Memory is known exactly, so every proposal fits.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np

from hsdag_ray.core.costgraph import CostGraph

__all__ = ["ProfileThompson", "NOISE_LEVELS"]

#: relative measurement noise levels the search chooses among by marginal likelihood
NOISE_LEVELS = (0.001, 0.003, 0.01, 0.03, 0.1)
#: measurements before the noise level is fitted (``noise`` until then)
NOISE_FIT_AFTER = 10
#: random changes of the best placement tried when every posterior draw repeats one
#: (20 of one node, then 20 of two nodes, and so on)
LOCAL_TRIES = 200


class ProfileThompson:
    """Thompson sampling over the exact solver (see the module docstring).

    Args:
        num_nodes / num_devices: the problem's size (those of ``costs``).
        budget: placements the search may propose (unused: every proposal is chosen alike).
        seed: random seed of the posterior samples.
        start: unused (the first proposal is the profile's own optimum).
        costs: the run's profile as a cost graph of its (coarsened) graph.
        objective: must be ``sequential``, the objective this model is linear for.
        sigma: the prior's relative spread of each cost (0.5: a node's time is
            trusted to about half its value).
        noise: a measurement's noise, relative to its latency, until the search fits
            its own from :data:`NOISE_FIT_AFTER` measurements on.
        time_limit: seconds for each exact solve (a MILP stopped early gives its best).
        retries: posterior samples drawn per proposal before changing the best measured placement instead.
    """

    def __init__(self, num_nodes: int, num_devices: int, budget: int, seed: int = 0,
                 start: Optional[np.ndarray] = None, *, costs: CostGraph,
                 objective: str = "sequential", sigma: float = 0.5, noise: float = 0.02,
                 time_limit: float = 10.0, retries: int = 4) -> None:
        from envs.simulator import Simulator
        from policies.exact import exact_method

        if objective != "sequential":
            raise ValueError(f"the profile refit models the sequential objective, not {objective!r}")
        if costs.num_nodes != num_nodes or costs.num_devices != num_devices:
            raise ValueError(f"the cost graph has {costs.num_nodes} nodes on {costs.num_devices} "
                             f"devices, the run {num_nodes} on {num_devices}")
        self.costs, self.objective = costs, objective
        self.solver = exact_method(costs, objective)
        self.sim = Simulator(costs)
        self.rng = np.random.default_rng(seed)
        self.noise, self.time_limit, self.retries = noise, time_limit, retries
        t0 = np.asarray(costs.compute_s, dtype=np.float64)
        self.free = np.isfinite(t0)  # (node, device) pairs a node can run on
        self.t0 = np.where(self.free, t0, 0.0)
        scale = float(np.min(self.t0.sum(axis=0)[np.isfinite(t0).all(axis=0)], initial=self.t0.sum()))
        b0 = float(costs.boundary_s)
        # prior mean and variance of (t flattened, a, b, c)
        self.mu0 = np.concatenate([self.t0.ravel(), [1.0, b0, 0.0]])
        self.var0 = np.concatenate([(sigma * self.t0.ravel()) ** 2,
                                    [sigma ** 2, max(b0, 1e-6) ** 2, (0.05 * scale) ** 2]])
        self.placements: list[np.ndarray] = []
        self.rows: list[np.ndarray] = []  # each measured placement's features
        self.latencies: list[float] = []
        self.seen: set[bytes] = set()
        self.proposals = {"mean": 0, "sample": 0, "local": 0}
        self._noise_at: tuple[int, float] = (-1, noise)  # (measurements, level) last fitted
        self._kernel_at: tuple[int, Any] = (-1, None)  # (measurements, what _kernel gives)

    # ------------------------------------------------------------------ model
    def _features(self, p: np.ndarray) -> np.ndarray:
        n, D = self.costs.num_nodes, self.costs.num_devices
        x = np.zeros(n * D + 3)
        x[np.arange(n) * D + p] = 1.0
        br = self.sim.sequential(p).breakdown
        x[n * D:] = (br["transfer_s"], br["stages"] - 1.0, 1.0)
        return x

    def _solve_weights(self, theta_prior: np.ndarray, jitter: Optional[np.ndarray]) -> np.ndarray:
        """``theta_prior`` conditioned on the measurements: the posterior mean when it is the
        prior mean and ``jitter`` is None, a posterior sample when it is a prior sample and
        ``jitter`` the measurements' noise draw."""
        if not self.placements:
            return theta_prior
        X, y, prior_k = self._kernel()
        noise_var = (self.noise_level() * y) ** 2 + 1e-18
        K = prior_k + np.diag(noise_var)
        resid = y - X @ theta_prior - (0.0 if jitter is None else jitter * np.sqrt(noise_var))
        alpha = np.linalg.solve(K, resid)
        return theta_prior + self.var0 * (X.T @ alpha)

    def _kernel(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The measurements' features ``X``, latencies ``y`` and prior covariance
        ``X S0 X^T``, computed once per measurement count (a proposal conditions on
        them up to ``retries + 1`` times, and the noise fit once more)."""
        m = len(self.rows)
        if self._kernel_at[0] != m:
            X = np.stack(self.rows)
            self._kernel_at = (m, (X, np.asarray(self.latencies), (X * self.var0) @ X.T))
        return self._kernel_at[1]

    def noise_level(self) -> float:
        """The measurements' relative noise: ``noise`` until there are
        :data:`NOISE_FIT_AFTER` measurements, then the value of :data:`NOISE_LEVELS` under
        which they are likeliest (the marginal likelihood of Bayesian linear regression),
        so a deterministic simulator is fitted closely and a noisy machine loosely."""
        m = len(self.latencies)
        if m < NOISE_FIT_AFTER:
            return self.noise
        if self._noise_at[0] != m:
            X, y, prior_k = self._kernel()
            resid = y - X @ self.mu0
            best, level = -np.inf, self.noise
            for rel in NOISE_LEVELS:
                try:
                    c = np.linalg.cholesky(prior_k + np.diag((rel * y) ** 2 + 1e-18))
                except np.linalg.LinAlgError:
                    continue
                z = np.linalg.solve(c, resid)
                loglik = -0.5 * z @ z - np.log(np.diag(c)).sum()
                if loglik > best:
                    best, level = loglik, rel
            self._noise_at = (m, level)
        return self._noise_at[1]

    def _refitted(self, theta: np.ndarray) -> CostGraph:
        n, D = self.costs.num_nodes, self.costs.num_devices
        t = np.maximum(theta[: n * D].reshape(n, D), 0.0)
        a, b = max(float(theta[n * D]), 0.0), max(float(theta[n * D + 1]), 0.0)
        g = self.costs
        change: dict[str, Any] = {"compute_s": np.where(self.free, t, np.inf), "boundary_s": b}
        if g.tensor_transfer_s is not None:
            change["tensor_transfer_s"] = a * g.tensor_transfer_s
        else:
            change["link_latency_s"] = a * g.link_latency_s
            change["link_bandwidth_Bps"] = g.link_bandwidth_Bps / max(a, 1e-12)
        return dataclasses.replace(g, **change)

    def _placement(self, theta: np.ndarray) -> Optional[np.ndarray]:
        from policies.exact import solve

        res = solve(self._refitted(theta), self.objective, self.solver, time_limit=self.time_limit)
        return np.asarray(res.placement, dtype=np.int64) if res.feasible else None

    def _new(self, p: Optional[np.ndarray]) -> bool:
        return p is not None and p.tobytes() not in self.seen

    # --------------------------------------------------------------- protocol
    def propose(self) -> np.ndarray:
        p = self._placement(self._solve_weights(self.mu0, None))
        kind = "mean"
        spread = 1.0
        for _ in range(self.retries if not self._new(p) else 0):
            prior = self.mu0 + spread * np.sqrt(self.var0) * self.rng.standard_normal(self.mu0.size)
            p = self._placement(self._solve_weights(prior, self.rng.standard_normal(len(self.latencies))))
            kind, spread = "sample", spread * 1.5
            if self._new(p):
                break
        if not self._new(p):
            p, kind = self._local(), "local"
        self.proposals[kind] += 1
        self.seen.add(p.tobytes())
        return p

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
        if np.isfinite(latency_s) and latency_s > 0 and self.sim.check(p) is None:
            self.placements.append(p.copy())
            self.rows.append(self._features(p))
            self.latencies.append(float(latency_s))

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state,
                "placements": [p.tolist() for p in self.placements],
                "latencies": self.latencies, "seen": [np.frombuffer(k, dtype=np.int64).tolist()
                                                      for k in self.seen],
                "proposals": self.proposals}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.placements = [np.asarray(p, dtype=np.int64) for p in state["placements"]]
        self.rows = [self._features(p) for p in self.placements]
        self.latencies = [float(v) for v in state["latencies"]]
        self.seen = {np.asarray(p, dtype=np.int64).tobytes() for p in state["seen"]}
        self.proposals = dict(state["proposals"])
        self._noise_at, self._kernel_at = (-1, self.noise), (-1, None)  # fitted to other rows
