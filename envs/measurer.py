"""How a method's placement becomes a measurement and a reward, written once.

:class:`Measurer` is the one path from a proposed placement to what the method learns
from, for every way a method runs: the RLlib environment
(:class:`envs.placement_env.PlacementEnv`, through the run's shared store), in-process
runs (:func:`hsdag_ray.run.inprocess.run_method`) and device-set training
(:class:`policies.gdp.device_training.Problem`). In order:

1. **Repair.** With a cost graph to repair to (``memory_penalty="repair"`` and a
   profile of every device), a proposal the profile says breaks a memory limit is
   moved within the limits (:func:`hsdag_core.fit.repair`) before anything else; each
   distinct proposal is repaired once (a repair may solve a small MILP). A proposal no
   repair fits is measured as proposed (it fails, as a memory failure).
2. **Cache.** The cache (:class:`envs.store.MeasurementStore`) is keyed by the
   placement measured, that is by the **repair**, not by the proposal: two proposals
   that repair to one placement are one measurement, and the second is answered from
   the cache. What a run is charged for is what it timed. A transient failure (a
   timeout) is not cached.
3. **Budget.** With ``budget``, a new placement past the budget is not measured
   (:meth:`Measurer.measure` returns None), and with ``proposal_cap`` neither is
   anything after ``proposal_cap * budget`` proposals (a settled policy proposes few
   new placements). Cached answers cost no budget.
4. **Screen** (the RLlib environment with ``--screen``): a new placement the run's
   latency model says is clearly slower than the run's best is answered with its
   prediction, unmeasured (:mod:`envs.screen`).
5. **Measure** on the backend, stamped with the wall-clock time it ended (``t`` in the
   store's log: the per-measurement curve's clock, :func:`best_curve`).
6. **Reward.** A measurement that ran is rewarded as its latency; a failure as
   ``failure_factor`` times the reference latency, graded by how far it is over a
   memory limit unless ``memory_penalty`` is ``flat`` (:meth:`Measurer.reward_latency`),
   then turned into the run's reward (:func:`envs.env_config.reward_of`).
"""
from __future__ import annotations

import math
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np

from envs.base import Backend, Measurement
from envs.env_config import TRANSIENT_STAGES, reward_of
from envs.store import MeasurementStore, StoreClient, placement_key

__all__ = ["Measurer", "best_curve"]

#: distinct proposals whose repair a measurer remembers (then it starts over)
REPAIRS_KEPT = 20000


class Measurer:
    """Repair, cache, budget, screen, measure and reward (module docstring).

    Args:
        backend: what measures a placement (device index per node).
        graph_id: the graph's key in the store (placements of other graphs share it).
        num_nodes: the graph's nodes; longer (padded) proposals are cut to them.
        store: the run's store (a :class:`~envs.store.StoreClient` or a
            :class:`~envs.store.MeasurementStore`); a new local one when None.
        repair_to: the cost graph an over-memory proposal is repaired to, or None.
        budget: new placements measured at most (None: no budget).
        proposal_cap: with ``budget``, proposals at most, as a multiple of it.
        failure_factor, memory_penalty, reward: how a measurement is rewarded.
        screen: the run's latency model (:class:`envs.screen.Screen`) or None.
        node: called for the measuring machine's name, logged with each measurement.
    """

    def __init__(self, backend: Backend, graph_id: str, num_nodes: int, store=None,
                 repair_to=None, budget: Optional[int] = None, proposal_cap: Optional[int] = None,
                 failure_factor: float = 10.0, memory_penalty: str = "repair",
                 reward: str = "inverse", screen=None,
                 node: Optional[Callable[[], Optional[str]]] = None) -> None:
        self.backend, self.graph_id, self.n = backend, graph_id, int(num_nodes)
        self.store = store if store is not None else StoreClient(MeasurementStore())
        self.repair_to = repair_to
        self.budget, self.proposal_cap = budget, proposal_cap
        self.failure_factor, self.memory_penalty, self.reward_kind = failure_factor, memory_penalty, reward
        self.screen, self.node = screen, node
        #: the latency failures are rewarded relative to (:meth:`find_reference`)
        self.reference_s = math.nan
        self.measured = self.proposed = 0
        self._repairs: dict[bytes, np.ndarray] = {}

    # ------------------------------------------------------------- the path
    def repaired(self, placement: Any) -> np.ndarray:
        """``placement`` (cut to the graph's nodes) repaired to :attr:`repair_to`; itself
        without limits or when no repair fits."""
        p = np.asarray(placement, dtype=np.int64)[: self.n]
        if self.repair_to is None:
            return p
        key = p.tobytes()
        if key not in self._repairs:
            from hsdag_core.fit import repair

            if len(self._repairs) >= REPAIRS_KEPT:
                self._repairs.clear()
            fixed = repair(self.repair_to, p)
            self._repairs[key] = p if fixed is None else fixed
        return self._repairs[key]

    def measure(self, placement: Any, suggested: bool = False) -> Optional[tuple[Measurement, bool]]:
        """The measurement of a proposed placement and whether it cost nothing (from the
        cache, or screened), or None when the budget or the proposal cap is reached.
        ``suggested``: a guide's proposal (logged as such, never screened)."""
        if self.budget is not None and self.proposal_cap is not None \
                and self.proposed >= self.proposal_cap * self.budget:
            return None
        p = self.repaired(placement)
        key = placement_key(self.graph_id, p)
        hit = self.store.get(key)
        if hit is None and self.budget is not None and self.measured >= self.budget:
            return None
        self.proposed += 1
        if hit is not None:
            extra = {k: hit["info"][k] for k in ("memory_over",) if k in hit["info"]}
            return Measurement(ok=hit["ok"], latency_s=hit["latency_s"], backend=self.backend.name,
                               stage=hit["info"].get("stage"), error=hit["info"].get("error"),
                               info=extra), True
        guess = None if suggested else self._screened(p)
        if guess is not None:
            return Measurement(ok=True, latency_s=guess, backend=self.backend.name,
                               info={"screened": True}), True
        m = self.backend.measure_array(p, race=self.backend.races)
        self.measured += 1
        info: dict[str, Any] = {"stage": m.stage, "error": m.error} if not m.ok else {}
        if "memory_over" in m.info:
            info["memory_over"] = m.info["memory_over"]
        if self.node is not None:
            info["node"] = self.node()
        if suggested:
            info["suggested"] = True
        info["t"] = time.time()
        # a timeout says the machine was busy, not that the placement cannot run
        self.store.put(key, m.latency_s if m.ok else math.inf, m.ok, p.tolist(), info,
                       cache=m.ok or m.stage not in TRANSIENT_STAGES)
        return m, False

    def _screened(self, p: np.ndarray) -> Optional[float]:
        """With a screen: the predicted latency of a placement clearly slower than the
        run's best (counted in the store as screened, not measured), else None."""
        if self.screen is None:
            return None
        self.screen.sync(self.store)
        best = self.store.best()
        mine = best is not None and str(best.get("key", "")).startswith(self.graph_id + ":")
        guess = self.screen.verdict(p, best["latency_s"] if mine else None)
        if guess is not None:
            self.store.count_screened()
        return guess

    def measure_untracked(self, placement: Any) -> Measurement:
        """Measure a placement that is not the method's (a baseline or reference): never
        repaired, cached, counted or the run's best, and always timed in full."""
        return self.backend.measure_array(np.asarray(placement, dtype=np.int64)[: self.n], race=False)

    # ------------------------------------------------------------ the reward
    def reward_latency(self, m: Measurement) -> float:
        """The latency a measurement is rewarded as: its own when it ran, else
        ``failure_factor`` times the reference, graded by how far it is over memory."""
        if m.ok:
            return m.latency_s
        graded = m.stage == "memory" and self.memory_penalty != "flat"
        over = float(m.info.get("memory_over", 0.0)) if graded else 0.0
        return self.failure_factor * self.reference_s * (1.0 + over)

    def reward(self, m: Measurement) -> float:
        return reward_of(self.reward_latency(m), self.reward_kind, self.reference_s)

    def find_reference(self, devices: Sequence[str], choice: str = "best_single",
                       graph_name: str = "the graph") -> tuple[float, str, dict[str, float]]:
        """Each device's latency (``inf`` when the model does not run on it), and the
        reference latency of rewards and failures with its basis; sets :attr:`reference_s`.

        The reference is the fastest single device (or the one named by ``choice``);
        when no single device runs the model, a balanced split (the first ``1/D`` of the
        nodes on the first device, and so on); when that fails too, the simulator's
        latency of the fastest single device with memory limits ignored (an estimate);
        with nothing to estimate from, a :class:`~hsdag_core.errors.GraphError` says why.
        """
        singles, errors = {}, {}
        for d, name in enumerate(devices):
            m = self.measure_untracked(np.full(self.n, d))
            singles[name] = m.latency_s if m.ok else math.inf
            if not m.ok:
                errors[name] = m.error
        if choice == "best_single":
            ref, basis = min(singles.values()), "best_single"
        elif choice in singles:
            ref, basis = singles[choice], choice
        else:
            raise ValueError(f"reference {choice!r} is neither best_single nor a device "
                             f"({', '.join(devices)})")
        if not math.isfinite(ref):
            balanced = np.arange(self.n) * len(devices) // self.n
            m = self.measure_untracked(balanced)
            sim = self.backend.sim
            if m.ok:
                ref, basis = m.latency_s, "balanced_split"
            elif sim is not None:
                ref = min(sim.sequential(np.full(self.n, d)).value for d in range(len(devices)))
                basis = "estimate_without_memory_limits"
            else:
                from hsdag_core.errors import GraphError

                first = next(iter(errors.items()), ("", m.error))
                raise GraphError(f"neither a single device nor a balanced split of {graph_name} runs "
                                 f"on {', '.join(devices)} ({first[0]}: {first[1]}), so placements "
                                 "have no reference latency; check the devices and the model")
        self.reference_s = ref
        return ref, basis, singles


def best_curve(log: Sequence[dict[str, Any]], start: Optional[float] = None) -> list[dict[str, Any]]:
    """The best so far after every measurement of a store's log (in the order measured):
    one row each, ``measurement`` (1, 2, ...), ``latency_s`` (None: it failed),
    ``best_latency_s`` (None: nothing feasible yet) and, with ``start`` (a
    :func:`time.time`), ``wall_s``: seconds from ``start`` to the end of that
    measurement (None for an entry logged without its time)."""
    rows, best = [], math.inf
    for k, e in enumerate(log, 1):
        ok = bool(e.get("ok")) and e.get("latency_s") is not None and math.isfinite(e["latency_s"])
        if ok:
            best = min(best, float(e["latency_s"]))
        row = {"measurement": k, "latency_s": float(e["latency_s"]) if ok else None,
               "best_latency_s": best if math.isfinite(best) else None}
        if start is not None:
            row["wall_s"] = e["t"] - start if e.get("t") is not None else None
        rows.append(row)
    return rows
