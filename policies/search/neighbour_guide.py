"""Untried neighbours of the run's best for any method (``--neighbour-every K``, part of ``--guide``).

A policy that samples around the run's best proposes it with several changes at
once and can settle one single change short of an optimum that a local search
would try. For every ``K`` placements proposed in the run, the driver queues one
*untried neighbour* of the run's best in the store
(:meth:`envs.store.MeasurementStore.suggest`): the best with one node on another
device, skipping every placement the run has measured; once all of those are
measured, the best with both ends of one edge on another device. With a profile
of every device (``sequential`` or ``throughput``) the neighbours come in the
order of the profile refitted to every measurement of the run so far
(:class:`envs.latency_model.LatencyModel`, ``--method refit``'s model), a
neighbour that does not fit is left out, and a single change that does not fit
gives way to its *swaps* (the node onto the full device and, in turn, each node
there off it); at each new best the exact solver's placement on that refitted
profile comes first, unless measured, because the exchanges of many nodes that a
memory limit asks for are no neighbour of anything measured. Without a profile,
under ``parallel``, or where a tier is too large to estimate one by one
(:data:`RANK_WORK`), the order is random, without swaps, drawn again whenever the
best changes.

The environments measure the neighbours as placements of the run, counted in the
budget (as ``--refit-every``'s, :mod:`policies.search.refit_guide`); a better one
becomes the run's best. It works with any objective and backend. ``--guide``
turns it on at one neighbour per :data:`hsdag_ray.run.resolve.NEIGHBOUR_EVERY`
placements unless ``--refit-every`` is set; ``--neighbour-every 0`` is off.
Measured results are in docs/results/search-aids.md.
"""
from __future__ import annotations

import math
from typing import Iterator, Optional

import numpy as np

from envs.latency_model import MODELED_OBJECTIVES, LatencyModel
from envs.simulator import Simulator
from envs.store import graph_log, placement_key
from hsdag_core.costgraph import CostGraph
from policies.solvers.exact import exact_method, solve

__all__ = ["NeighbourGuide", "RANK_WORK"]

#: a tier whose neighbours times the graph's nodes exceed this is tried in a random order,
#: not estimated one by one (about a second of the simulator's vectorised objectives)
RANK_WORK = 5_000_000

#: seconds for the exact solve of the refitted profile at each new best (a MILP stopped
#: early gives its best placement so far)
OPTIMUM_SECONDS = 5.0


class NeighbourGuide:
    """Untried single- and edge-changes of the run's best, proposed into the run's store.

    Args:
        env: the driver's environment (its graph, devices and store key).
        store: the run's store; what it holds already counts as measured and as
            proposed before the guide.
        every: placements proposed in the run per neighbour (at least 2).
        seed: the order's seed.
        objective: the run's; the profile's estimate of a neighbour is its value.
        ranked: whether to put the refitted profile's optimum first, order the neighbours
            by its estimate and swap where a single change does not fit
            (``--neighbour-order profile``), where the environment has a profile of every
            device (``env.limits``).
    """

    def __init__(self, env, store, every: int, seed: int = 0, objective: str = "sequential",
                 ranked: bool = True) -> None:
        self.graph_id, self.every, self.store = env.graph_id, every, store
        self.num_devices = len(env.devices)
        ei = np.asarray(env.graph.edge_index(), dtype=np.int64).reshape(2, -1)
        self.edges = np.unique(np.sort(ei[:, ei[0] != ei[1]], axis=0), axis=1)
        self.rng = np.random.default_rng(seed)
        self.objective = objective
        self.model = _model(env, objective) if ranked else None
        self._read = 0
        self._measured: set[str] = set()
        self._queued: set[str] = set()  # proposed by the guide (the optimum may be a neighbour too)
        self._best: Optional[tuple[float, np.ndarray]] = None
        self._order: Optional[Iterator[np.ndarray]] = None
        self._learn()
        self._at = store.stats()["placements"]
        self.proposed = 0

    def _learn(self) -> bool:
        """Read the store's new measurements of the graph; True when the best changed."""
        new, self._read = graph_log(self.store, self.graph_id, self._read)
        changed = False
        for e in new:
            p = np.asarray(e["placement"], dtype=np.int64)
            self._measured.add(placement_key(self.graph_id, p))
            s = float(e["latency_s"]) if e["ok"] else math.inf
            if self.model is not None:
                self.model.add(p, s)  # learns nothing from a failure
            if math.isfinite(s) and (self._best is None or s < self._best[0]):
                self._best, changed = (s, p), True
        return changed

    def _neighbours(self, best: np.ndarray) -> Iterator[np.ndarray]:
        """The best's single-node changes (and their swaps), then its edge changes; each
        tier in the order of the refitted profile's estimate (random among equals; those it
        says do not fit left out), or in a random order without one."""
        n, d = best.size, self.num_devices
        sim = None if self.model is None else \
            Simulator(self.model.refitted(self.model.posterior_mean()))

        def singles() -> Iterator[np.ndarray]:
            for flat in self.rng.permutation(n * (d - 1)):
                v, shift = divmod(int(flat), d - 1)
                p = best.copy()
                p[v] = (p[v] + 1 + shift) % d
                yield p

        def edges() -> Iterator[np.ndarray]:
            for flat in self.rng.permutation(self.edges.shape[1] * d):
                e, dev = divmod(int(flat), d)
                u, v = self.edges[:, e]
                if best[u] == dev or best[v] == dev:  # a single change (the tier above) or none
                    continue
                p = best.copy()
                p[u] = p[v] = dev
                yield p

        if sim is not None:
            optimum = self._refitted_optimum(sim.graph)
            if optimum is not None:
                yield optimum
        yield from self._ranked(singles(), sim, n * (d - 1) * n, swaps_of=best)
        yield from self._ranked(edges(), sim, self.edges.shape[1] * d * n)

    def _refitted_optimum(self, refitted: CostGraph) -> Optional[np.ndarray]:
        """The exact solver's placement on the refitted profile (``--method refit``'s first
        proposal, here on every measurement so far), or None where no solver applies or
        it finds none within :data:`OPTIMUM_SECONDS`."""
        method = exact_method(refitted, self.objective)
        if method is None:
            return None
        res = solve(refitted, self.objective, method, time_limit=OPTIMUM_SECONDS)
        return np.asarray(res.placement, dtype=np.int64) if res.feasible else None

    def _ranked(self, tier: Iterator[np.ndarray], sim: Optional[Simulator], work: int,
                swaps_of: Optional[np.ndarray] = None) -> Iterator[np.ndarray]:
        """``tier`` (a random order) sorted by its estimates on ``sim`` (the refitted
        profile), stably; as it comes without one, or when estimating each is too much
        ``work`` (:data:`RANK_WORK`). With ``swaps_of`` (the best, whose single changes
        ``tier`` holds): a single change that does not fit gives way to its swaps, ranked
        with the rest."""
        if sim is None or work > RANK_WORK:
            yield from tier
            return

        def estimate(p: np.ndarray) -> float:
            r = sim.evaluate(p, self.objective)
            return r.value if r.feasible else math.inf

        tier = list(tier)
        est = [estimate(p) for p in tier]
        if swaps_of is not None:
            for p in [p for p, e in zip(tier, est) if not math.isfinite(e)]:
                for q in self._swaps(swaps_of, p):
                    if len(tier) * p.size > RANK_WORK:
                        break
                    tier.append(q)
                    est.append(estimate(q))
        for i in np.argsort(np.asarray(est), kind="stable"):
            if math.isfinite(est[i]):  # one that does not fit would be repaired into another
                yield tier[int(i)]

    @staticmethod
    def _swaps(best: np.ndarray, single: np.ndarray) -> Iterator[np.ndarray]:
        """``single`` (the best with node ``u`` on device ``dev``) with, in turn, each node
        the best has on ``dev`` moved to ``u``'s device in the best: a swap that may fit
        where the single change does not (two blocks of about the same size exchanged)."""
        [u] = np.nonzero(single != best)[0]
        for v in np.nonzero(best == single[u])[0]:
            q = single.copy()
            q[v] = best[u]
            yield q

    def _next_untried(self) -> Optional[np.ndarray]:
        for p in self._order or ():
            key = placement_key(self.graph_id, p)
            if key not in self._measured and key not in self._queued:
                self._queued.add(key)
                return p
        return None

    def after_iteration(self) -> int:
        """Learn the store's new measurements; queue one untried neighbour of the best per
        ``every`` placements proposed since the last; return how many it queued."""
        if self._learn() or (self._order is None and self._best is not None):
            self._order = self._neighbours(self._best[1])
        due = (self.store.stats()["placements"] - self._at) // self.every
        if due <= 0:
            return 0
        self._at += due * self.every
        queued: list[list[int]] = []
        while len(queued) < due and (p := self._next_untried()) is not None:
            queued.append(p.tolist())
        if queued:
            self.store.suggest(self.graph_id, queued)
        self.proposed += len(queued)
        return len(queued)


def _model(env, objective: str) -> Optional[LatencyModel]:
    """The run's profile as a latency model to refit to its measurements, or None without
    a profile of every device, under ``parallel`` (not linear in the costs, and a list
    schedule per neighbour is too slow to rank them all), or on a graph too large to rank
    a tier of single changes (:data:`RANK_WORK`; the model's rows grow with the nodes)."""
    n = env.graph.num_nodes
    if env.limits is None or objective not in MODELED_OBJECTIVES or \
            n * (len(env.devices) - 1) * n > RANK_WORK:
        return None
    return LatencyModel(env.limits, objective=objective)

