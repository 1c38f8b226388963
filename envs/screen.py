"""Screening proposals with a latency model: measure only what may beat the run's best.

A measurement is the expensive part of a run (seconds on a real machine); a
policy proposes many placements that are plainly slower than the best it has
found. With ``--screen Z`` every environment keeps a
:class:`~envs.latency_model.LatencyModel` (the run's profile as the prior,
refitted to every measurement in the run's store, whichever EnvRunner made it)
and, before measuring a new placement, predicts its latency: a placement whose
prediction, less ``Z`` of its standard deviations, is still slower than the run's
best is not measured. It is rewarded as its predicted latency and counted as
*screened* (a placement proposed, not a measurement), so a run counted in
measurements spends its budget on the placements that may win. Everything else
is measured as before, and the run's best is always a measured latency.

The model is that of the ``sequential`` objective (what the simulator of that
objective computes); a machine departs from it, which the model's fitted noise
level absorbs: the further the measurements stray from the linear model, the
wider its predictions and the more it measures. ``Z`` (above 0; 0 is off) is
how sure the screen must be: the larger, the less it leaves out
(docs/results/search-aids.md measures the trade).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from envs.latency_model import LatencyModel
from envs.store import graph_log
from hsdag_core.costgraph import CostGraph

__all__ = ["Screen"]


class Screen:
    """A run's latency model in one environment, kept up to date from the run's store.

    Args:
        costs: the run's profile of every device as a cost graph of its graph (the prior).
        graph_id: the environment's graph key prefix: the store's measurements of
            other graphs are not this model's.
        z: standard deviations of its prediction by which a placement's predicted
            latency must exceed the best for it to be left unmeasured.
    """

    def __init__(self, costs: CostGraph, graph_id: str, z: float) -> None:
        self.model = LatencyModel(costs)
        self.graph_id = graph_id
        self.z = z
        self._read = 0  # store log entries read so far

    def sync(self, store) -> None:
        """Learn from the store's measurements not read yet."""
        new, self._read = graph_log(store, self.graph_id, self._read)
        for e in new:
            if e["ok"]:
                self.model.add(np.asarray(e["placement"], dtype=np.int64), float(e["latency_s"]))

    def verdict(self, placement: np.ndarray, best_s: Optional[float]) -> Optional[float]:
        """The predicted latency when ``placement`` is clearly slower than ``best_s``
        (not worth measuring), else None (measure it)."""
        if best_s is None or not np.isfinite(best_s) or self.model.sim.check(placement) is not None:
            return None
        mean, std = self.model.predict(placement)
        return mean if mean - self.z * std > best_s else None
