"""A placement's latency as a linear model of the profile's costs, refitted to measurements.

Under the ``sequential`` objective a placement's latency is linear in the
unknown costs::

    L(p) = sum_i t[i, p_i] + a * transfer(p) + b * boundaries(p) + c

with ``t[i, d]`` node ``i``'s time on device ``d``, ``transfer(p)`` the
profile's transfer time of ``p``, ``boundaries(p)`` its stage boundaries and
``c`` a constant (a backend's fixed overhead). The prior is independent
Gaussians around the profile: ``t[i, d] ~ N(t0[i, d], (sigma t0[i, d])^2)``,
``a ~ N(1, sigma^2)``, ``b`` around the profile's boundary cost, ``c`` around 0;
with ``device_scale`` each device's times also share one factor,
``t[i, d] = t0[i, d] (1 + s_d) + e[i, d]`` with ``s_d ~ N(0, device_scale^2)`` (a device
the profile finds uniformly too fast or slow: one measurement of it, such as the device
alone, moves all its nodes' times in proportion);
each measurement is the linear function plus Gaussian noise, a share of its
size picked by marginal likelihood once there are measurements to tell (a
simulator is deterministic; a machine is not). The posterior is Bayesian
linear regression, computed in the space of the ``M`` measurements (an ``M x
M`` solve, so thousands of unknowns cost nothing); a posterior sample is a
prior sample corrected with the same solve (Wilson et al., ICML 2020,
"pathwise conditioning").

Under the ``throughput`` objective (pipelined: the largest device load) a
placement's latency is the largest of the devices' loads, each linear in the
same costs (its nodes' times and ``a`` times the transfers it sends or
receives). A measurement is read as the load of the device likeliest to be
its bottleneck by what the *other* measurements predict (each device's load
predicted without it, leave-one-out, equal to the measurement and the others
below it), and every measured placement is read again so after each new one:
a linearisation that is exact wherever the model names the bottleneck right.
Judged by the fit that includes it, a measurement would keep its first
reading, and the exact solver's proposals are balanced under the model, so
every reading starts as a near tie.

Two users: ``--method refit`` (:mod:`policies.search.refit`) solves the refitted
profile exactly, and the measurement screen (``--screen``,
:class:`envs.screen.Screen`) predicts a proposed placement's latency and
its uncertainty, and leaves unmeasured one that is clearly slower than the
run's best.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np
from scipy.linalg import solve_triangular
from scipy.stats import norm

from envs.simulator import Simulator
from hsdag_core.costgraph import CostGraph

__all__ = ["LatencyModel", "NOISE_LEVELS", "NOISE_FIT_AFTER", "MODELED_OBJECTIVES"]

#: the simulator objectives the model predicts (``parallel``'s schedule is not linear in the costs)
MODELED_OBJECTIVES = ("sequential", "throughput")

#: relative measurement noise levels the model chooses among by marginal likelihood
NOISE_LEVELS = (0.001, 0.003, 0.01, 0.03, 0.1)
#: measurements before the noise level is fitted (``noise`` until then)
NOISE_FIT_AFTER = 10
#: readings of the throughput measurements per new one, at most (until they hold)
REREADS = 3


class LatencyModel:
    """Bayesian linear regression of measured latencies on a profile's costs.

    Args:
        costs: the run's profile as a cost graph of its (coarsened) graph (the prior).
        sigma: the prior's relative spread of each cost (0.5: a node's time is
            trusted to about half its value).
        noise: a measurement's noise, relative to its latency, until the model fits
            its own from :data:`NOISE_FIT_AFTER` measurements on.
        objective: one of :data:`MODELED_OBJECTIVES`, what the measurements are.
        device_scale: the prior spread of each device's shared factor of its times (0:
            none; the module docstring).
    """

    def __init__(self, costs: CostGraph, sigma: float = 0.5, noise: float = 0.02,
                 objective: str = "sequential", device_scale: float = 0.0) -> None:
        if objective not in MODELED_OBJECTIVES:
            raise ValueError(f"the latency model predicts the {' and '.join(MODELED_OBJECTIVES)} "
                             f"objectives, not {objective!r}")
        self.costs, self.objective = costs, objective
        self.sim = Simulator(costs)
        self.noise = noise
        t0 = np.asarray(costs.compute_s, dtype=np.float64)
        self.free = np.isfinite(t0)  # (node, device) pairs a node can run on
        self.t0 = np.where(self.free, t0, 0.0)
        scale = float(np.min(self.t0.sum(axis=0)[np.isfinite(t0).all(axis=0)], initial=self.t0.sum()))
        b0 = float(costs.boundary_s)
        # prior mean and variance of (t flattened, a, b, c)
        self.mu0 = np.concatenate([self.t0.ravel(), [1.0, b0, 0.0]])
        self.var0 = np.concatenate([(sigma * self.t0.ravel()) ** 2,
                                    [sigma ** 2, max(b0, 1e-6) ** 2, (0.05 * scale) ** 2]])
        self.scaled = device_scale > 0  # the devices' shared factors follow (t, a, b, c)
        if self.scaled:
            D = costs.num_devices
            self.mu0 = np.concatenate([self.mu0, np.zeros(D)])
            self.var0 = np.concatenate([self.var0, np.full(D, device_scale ** 2)])
        self.placements: list[np.ndarray] = []
        self.rows: list[np.ndarray] = []  # each measured placement's features
        self.latencies: list[float] = []
        # throughput: each measurement's rows as each device's load, and the one it is read as
        self._device_rows: list[np.ndarray] = []
        self._readings: list[int] = []
        self.reset_cache()

    def reset_cache(self) -> None:
        """Forget what was computed from the measurements (after replacing them)."""
        self._noise_at: tuple[int, float] = (-1, self.noise)  # (measurements, level) last fitted
        self._kernel_at: tuple[int, Any] = (-1, None)  # (measurements, what _kernel gives)
        self._posterior_at: tuple[int, Any] = (-1, None)  # (measurements, (mean, cholesky))

    # ------------------------------------------------------------ measurements
    def features(self, p: np.ndarray, theta: Optional[np.ndarray] = None,
                 device: Optional[int] = None) -> np.ndarray:
        """The placement's row of the regression: one-hot node-device pairs, its
        transfer time, its stage boundaries and 1; under ``throughput``, those of
        ``device``, or when None of the device whose load is largest under the costs
        ``theta`` (the posterior mean when None), its transfers (sent and received) and
        no boundaries."""
        if self.objective == "throughput":
            rows = self.device_rows(p)
            if device is None:
                theta = self.posterior_mean() if theta is None else theta
                device = int(np.argmax(rows @ theta))  # each device's load (plus c)
            return rows[device]
        n, D = self.costs.num_nodes, self.costs.num_devices
        x = np.zeros(self.mu0.size)
        x[np.arange(n) * D + p] = 1.0
        br = self.sim.sequential(p).breakdown
        x[n * D:n * D + 3] = (br["transfer_s"], br["stages"] - 1.0, 1.0)
        if self.scaled:  # each device's profile time of its nodes
            x[n * D + 3:] = np.bincount(p, self.t0[np.arange(n), p], minlength=D)
        return x

    def device_rows(self, p: np.ndarray) -> np.ndarray:
        """``[D, n D + 3]``: under ``throughput``, the placement's row read as each device's
        load (its nodes there, its transfers sent and received, no boundaries, 1)."""
        n, D = self.costs.num_nodes, self.costs.num_devices
        comm = self.sim.device_transfers(p)
        rows = np.zeros((D, self.mu0.size))
        nodes = np.arange(n)
        rows[p, nodes * D + p] = 1.0
        rows[:, n * D] = comm
        rows[:, n * D + 2] = 1.0
        if self.scaled:
            own = np.bincount(p, self.t0[nodes, p], minlength=D)
            rows[np.arange(D), n * D + 3 + np.arange(D)] = own
        return rows

    def bottlenecks(self) -> list[int]:
        """Under ``throughput``, the device whose load each measurement is read as (empty
        under ``sequential``): with the measurements, what restores the model exactly."""
        return list(self._readings)

    def add(self, placement: np.ndarray, latency_s: float) -> bool:
        """Learn from a measured latency; False (and nothing learned) for a failed
        measurement (``inf``) or a placement over a memory limit (what was measured is
        its repair)."""
        p = np.asarray(placement, dtype=np.int64)
        if not (np.isfinite(latency_s) and latency_s > 0) or self.sim.check(p) is not None:
            return False
        if self.objective == "throughput":  # first read by the fit so far, then again
            rows = self.device_rows(p)
            self._readings.append(int(np.argmax(rows @ self.posterior_mean())))
            self._device_rows.append(rows)
            self.rows.append(rows[self._readings[-1]])
        else:
            self.rows.append(self.features(p))
        self.placements.append(p.copy())
        self.latencies.append(float(latency_s))
        if self.objective == "throughput":
            self._reread()
        return True

    def replace(self, placements: list[np.ndarray], latencies: list[float],
                bottlenecks: Optional[list[int]] = None) -> None:
        """Take these measurements instead of the model's (a search's saved state), read
        as the loads of ``bottlenecks`` under ``throughput`` (:meth:`bottlenecks`)."""
        self.placements = [np.asarray(p, dtype=np.int64) for p in placements]
        self.latencies = [float(v) for v in latencies]
        if self.objective == "throughput":
            self._device_rows = [self.device_rows(p) for p in self.placements]
            self._readings = ([int(d) for d in bottlenecks] if bottlenecks is not None else
                              [int(np.argmax(r @ self.mu0)) for r in self._device_rows])
            self.rows = [r[d] for r, d in zip(self._device_rows, self._readings)]
        else:
            self.rows = [self.features(p, self.mu0) for p in self.placements]
        self.reset_cache()
        if self.objective == "throughput" and bottlenecks is None:
            self._reread()

    def _reread(self) -> None:
        """Read every measurement again as the load of the device likeliest to have been its
        bottleneck, judged by what the other measurements say (:meth:`_bottleneck_odds`).
        Judged by the fit that already reads it as one device's load, a measurement would
        keep that reading: the exact solver's proposals are balanced under the model, so
        every device is a near tie, and a wrong first reading would hold for good."""
        for _ in range(REREADS):
            readings = [int(np.argmax(o)) for o in self._bottleneck_odds()]
            if readings == self._readings:
                return
            self._readings = readings
            self.rows = [r[d] for r, d in zip(self._device_rows, readings)]
            self.reset_cache()

    def _bottleneck_odds(self) -> list[np.ndarray]:
        """For each measurement, the log-likelihood of each device being its bottleneck: its
        load's prediction from the other measurements (leave-one-out, from the inverse of
        the kernel of all of them) equal to the measurement, every other device's below."""
        X, y, prior_k = self._kernel()
        noise_var = (self.noise_level() * y) ** 2 + 1e-18
        A = np.linalg.inv(prior_k + np.diag(noise_var))
        alpha = A @ (y - X @ self.mu0)
        F = np.stack(self._device_rows)  # [M, D, P]: each measurement's rows as each device's load
        sF = F * self.var0
        m, D = F.shape[:2]
        kx = (X @ sF.reshape(m * D, -1).T).reshape(m, m, D)  # [j, i, d]: prior covariances
        Akx = np.einsum("jk,kid->jid", A, kx)
        mean = F @ self.mu0 + np.einsum("jid,j->id", kx, alpha)
        var = (sF * F).sum(axis=2) - (kx * Akx).sum(axis=0)
        own = Akx[np.arange(m), np.arange(m)]  # [i, d]
        diag = np.diag(A)[:, None]
        mean -= own * alpha[:, None] / diag  # each measurement i left out
        var += own ** 2 / diag
        sd = np.sqrt(np.maximum(var, 0.0) + noise_var[:, None])
        z = (y[:, None] - mean) / sd
        below = norm.logcdf(z)
        return list(norm.logpdf(z) - np.log(sd) + below.sum(axis=1, keepdims=True) - below)

    def __len__(self) -> int:
        return len(self.latencies)

    # ------------------------------------------------------------------ model
    def _kernel(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The measurements' features ``X``, latencies ``y`` and prior covariance
        ``X S0 X^T``, computed once per measurement count."""
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
                z = solve_triangular(c, resid, lower=True)
                loglik = -0.5 * z @ z - np.log(np.diag(c)).sum()
                if loglik > best:
                    best, level = loglik, rel
            self._noise_at = (m, level)
        return self._noise_at[1]

    def condition(self, theta_prior: np.ndarray, jitter: Optional[np.ndarray] = None) -> np.ndarray:
        """``theta_prior`` conditioned on the measurements: the posterior mean when it is the
        prior mean and ``jitter`` is None, a posterior sample when it is a prior sample and
        ``jitter`` a standard normal draw per measurement (its noise)."""
        if not self.rows:
            return theta_prior
        X, y, prior_k = self._kernel()
        noise_var = (self.noise_level() * y) ** 2 + 1e-18
        K = prior_k + np.diag(noise_var)
        resid = y - X @ theta_prior - (0.0 if jitter is None else jitter * np.sqrt(noise_var))
        alpha = np.linalg.solve(K, resid)
        return theta_prior + self.var0 * (X.T @ alpha)

    def prior_sample(self, rng: np.random.Generator, spread: float = 1.0) -> np.ndarray:
        """A draw of the costs from the prior, its spread scaled by ``spread``."""
        return self.mu0 + spread * np.sqrt(self.var0) * rng.standard_normal(self.mu0.size)

    def posterior_mean(self) -> np.ndarray:
        """The costs' posterior mean (the prior's before any measurement)."""
        return self._posterior()[0]

    def _posterior(self) -> tuple[np.ndarray, Optional[np.ndarray]]:
        """The posterior mean and the Cholesky factor of ``K``, once per measurement count."""
        m = len(self.rows)
        if self._posterior_at[0] != m:
            chol = None
            if self.rows:
                X, y, prior_k = self._kernel()
                chol = np.linalg.cholesky(prior_k + np.diag((self.noise_level() * y) ** 2 + 1e-18))
            self._posterior_at = (m, (self.condition(self.mu0), chol))
        return self._posterior_at[1]

    def predict(self, placement: np.ndarray) -> tuple[float, float]:
        """The posterior mean and standard deviation of the placement's latency
        (without measurement noise: what the model is unsure of)."""
        x = self.features(np.asarray(placement, dtype=np.int64))
        mean, chol = self._posterior()
        sx = self.var0 * x
        var = float(x @ sx)
        if chol is not None:
            X, _, _ = self._kernel()
            v = solve_triangular(chol, X @ sx, lower=True)
            var -= float(v @ v)
        return float(x @ mean), float(np.sqrt(max(var, 0.0)))

    def refitted(self, theta: np.ndarray) -> CostGraph:
        """The profile with its costs replaced by ``theta`` (negative ones clipped)."""
        n, D = self.costs.num_nodes, self.costs.num_devices
        t = theta[: n * D].reshape(n, D)
        if self.scaled:
            t = t + self.t0 * theta[n * D + 3:]
        t = np.maximum(t, 0.0)
        a, b = max(float(theta[n * D]), 0.0), max(float(theta[n * D + 1]), 0.0)
        g = self.costs
        change: dict[str, Any] = {"compute_s": np.where(self.free, t, np.inf), "boundary_s": b}
        if g.tensor_transfer_s is not None:
            change["tensor_transfer_s"] = a * g.tensor_transfer_s
        else:
            change["link_latency_s"] = a * g.link_latency_s
            change["link_bandwidth_Bps"] = g.link_bandwidth_Bps / max(a, 1e-12)
        return dataclasses.replace(g, **change)
