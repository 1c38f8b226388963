"""Refit's proposals for a learned policy to sample around (``--refit-every K``).

``--method refit`` (:mod:`policies.search.refit`) corrects the run's profile with every
measured latency and proposes the exact solver's placement on the corrected
profile; on the wrong-profile cases of docs/results/search-aids.md it reaches 1.01x the optimum where
HSDAG and annealing do not. HSDAG samples around the run's best placement (its
incumbent prior). With ``--refit-every K`` the two share one run: the driver
keeps refit's search, fed with every measurement in the run's store, and after
each iteration queues in the store (:meth:`envs.store.MeasurementStore.suggest`)
one of refit's proposals per K placements proposed in the run since its last
(measured or answered from the cache: a policy settled on placements measured
before leaves the measurements to refit). The environments measure them, one per
step before the policy's placement, as placements of the run, counted in the
budget like any other (early on about one measurement in K + 1 is refit's); when
one is the run's best the policy samples around it from the next episode on.
What the policy finds beyond them is what learning adds to refit.
"""
from __future__ import annotations

import math

import numpy as np

from envs.store import graph_log

__all__ = ["RefitGuide"]


class RefitGuide:
    """Refit's search on the driver, proposing into the run's store.

    Args:
        env: the driver's environment (its graph, devices, profile and store key).
        store: the run's store; what it holds already is learned from, and counted as
            proposed before the guide (a resumed run does not catch up in one batch).
        every: placements proposed in the run per refit proposal (at least 2).
        seed: the posterior samples' seed.
        objective: must be ``sequential`` (checked before a run starts).
    """

    def __init__(self, env, store, every: int, seed: int = 0, objective: str = "sequential") -> None:
        from envs.baselines import profile_costs
        from policies.search.refit import ProfileThompson

        costs = profile_costs(env)
        if costs is None:
            raise ValueError("--refit-every needs a profile of every device")
        self.search = ProfileThompson(env.graph.num_nodes, len(env.devices), 0, seed=seed,
                                      costs=costs, objective=objective)
        self.graph_id, self.every, self.store = env.graph_id, every, store
        self._read = 0  # store log entries read so far
        self._learn()
        self._at = store.stats()["placements"]  # the run's placements proposed at the last proposal
        self.proposed = 0

    def _learn(self) -> None:
        new, self._read = graph_log(self.store, self.graph_id, self._read)
        for e in new:
            self.search.observe(np.asarray(e["placement"], dtype=np.int64),
                                float(e["latency_s"]) if e["ok"] else math.inf)

    def after_iteration(self) -> int:
        """Learn the store's new measurements; queue one proposal per ``every`` placements
        proposed since the last; return how many it queued."""
        self._learn()
        due = (self.store.stats()["placements"] - self._at) // self.every
        if due > 0:  # several at once: a batch of posterior draws (batch Thompson sampling)
            self.store.suggest(self.graph_id, [self.search.propose().tolist() for _ in range(due)])
            self._at += due * self.every
            self.proposed += due
        return due
