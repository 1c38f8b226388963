"""Every measurement of a run in one place: the cache, the best, the log.

A :class:`MeasurementStore` keys measurements by (graph, placement), so a
placement already measured by any EnvRunner is never measured again (a
transient failure, such as a timeout on a busy machine, is logged but not
cached: the placement is measured again when proposed again), keeps the best
few feasible placements seen (the run's end times them again), logs every new
measurement for the driver to read incrementally, and keeps the errors the
measuring processes report (so a run whose every EnvRunner fails can say why). In a Ray run it lives in one named actor
(:func:`store_actor`) shared by all EnvRunners; in tests and single-process
use it is a plain object. Both expose the same methods.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

__all__ = ["MeasurementStore", "StoreClient", "placement_key", "store_actor", "graph_log"]


def placement_key(graph_id: str, placement: np.ndarray) -> str:
    """A short stable key for a placement (device index per node) of a graph."""
    p = np.ascontiguousarray(np.asarray(placement, dtype=np.int16))
    return graph_id + ":" + hashlib.blake2b(p.tobytes(), digest_size=12).hexdigest()


def graph_log(store, graph_id: str, start: int) -> tuple[list[dict[str, Any]], int]:
    """The measurements of ``graph_id``'s placements in ``store``'s log from index
    ``start`` on (each with its placement), and the index to read from next: what a
    model refitted to a run's measurements learns from (:mod:`envs.screen`,
    :mod:`policies.search.refit_guide`)."""
    new = store.log_since(start)
    prefix = graph_id + ":"
    return [e for e in new if "placement" in e and str(e["key"]).startswith(prefix)], start + len(new)


@dataclass
class _Entry:
    latency_s: float
    ok: bool
    info: dict[str, Any]


#: how many of the best distinct placements a store keeps
TOP_K = 5
#: how many reported errors a store keeps
MAX_ERRORS = 20


class MeasurementStore:
    """Cache, best-so-far and log of a run's measurements."""

    def __init__(self) -> None:
        self._cache: dict[str, _Entry] = {}
        self._log: list[dict[str, Any]] = []
        self._best: Optional[dict[str, Any]] = None
        self._top: list[dict[str, Any]] = []
        self._errors: list[str] = []
        self.hits = 0
        self.feasible_hits = 0
        self.screened = 0
        self._suggested: dict[str, list[list[int]]] = {}

    def get(self, key: str) -> Optional[dict[str, Any]]:
        """The cached result for ``key`` (and count a hit), or None."""
        e = self._cache.get(key)
        if e is None:
            return None
        self.hits += 1
        self.feasible_hits += int(e.ok)
        return {"latency_s": e.latency_s, "ok": e.ok, "info": e.info}

    def put(self, key: str, latency_s: float, ok: bool, placement: list[int],
            info: Optional[dict[str, Any]] = None, cache: bool = True) -> bool:
        """Record a new measurement; return True if it is the best so far.

        ``cache=False`` logs it without caching it (a transient failure). The log keeps
        of ``info`` the failure's ``stage`` and ``error``, the measuring ``runner`` and
        ``node``, whether a guide ``suggested`` it, and ``t``, the wall-clock time the
        measurement ended (:func:`envs.measurer.best_curve`)."""
        info = dict(info or {})
        if cache:
            self._cache[key] = _Entry(latency_s, ok, info)
        self._log.append({"key": key, "latency_s": latency_s, "ok": ok,
                          "placement": list(map(int, placement)), **{
            k: v for k, v in info.items() if k in ("stage", "error", "runner", "node", "suggested", "t")}})
        if not (ok and math.isfinite(latency_s)):
            return False
        entry = {"latency_s": latency_s, "placement": list(map(int, placement)), "key": key,
                 "index": len(self._log) - 1, "suggested": bool(info.get("suggested"))}
        if key not in {t["key"] for t in self._top}:
            self._top = sorted(self._top + [entry], key=lambda t: t["latency_s"])[:TOP_K]
        if self._best is None or latency_s < self._best["latency_s"]:
            self._best = entry
            return True
        return False

    def count_screened(self) -> None:
        """Count a placement proposed and left unmeasured: the run's latency model
        (``--screen``, :mod:`envs.screen`) said it is clearly slower than the best."""
        self.screened += 1

    def suggest(self, graph_id: str, placements: list[list[int]]) -> None:
        """Queue ``placements`` for the next steps of the environments of ``graph_id`` to
        measure as the run's own, one per step (``--refit-every``,
        :mod:`policies.search.refit_guide`); they replace those not taken yet (proposed
        knowing fewer measurements). Not part of the saved state: a resumed run
        suggests again."""
        self._suggested[graph_id] = [list(map(int, p)) for p in placements]

    def take_suggestion(self, graph_id: str) -> Optional[list[int]]:
        """The first placement queued for ``graph_id`` (and unqueue it), or None."""
        queue = self._suggested.get(graph_id)
        return queue.pop(0) if queue else None

    def top(self) -> list[dict[str, Any]]:
        """The best distinct feasible placements measured (at most :data:`TOP_K`), best first."""
        return [dict(t) for t in self._top]

    def report_error(self, text: str) -> None:
        """Keep an error a measuring process hit (the last :data:`MAX_ERRORS`)."""
        self._errors = (self._errors + [str(text)])[-MAX_ERRORS:]

    def errors(self) -> list[str]:
        return list(self._errors)

    def log_since(self, start: int) -> list[dict[str, Any]]:
        """Measurements recorded from index ``start`` on."""
        return self._log[start:]

    def best(self) -> Optional[dict[str, Any]]:
        return None if self._best is None else dict(self._best)

    def stats(self) -> dict[str, Any]:
        failures = sum(1 for e in self._log if not e["ok"])
        return {"measurements": len(self._log), "failures": failures, "cache_hits": self.hits,
                "screened": self.screened, "suggested": sum(1 for e in self._log if e.get("suggested")),
                "placements": len(self._log) + self.hits + self.screened,
                "feasible_placements": len(self._log) - failures + self.feasible_hits + self.screened,
                "best_latency_s": None if self._best is None else self._best["latency_s"]}

    def get_state(self) -> dict[str, Any]:
        return {"cache": {k: vars(e) for k, e in self._cache.items()}, "log": self._log,
                "best": self._best, "top": self._top, "errors": self._errors, "hits": self.hits,
                "feasible_hits": self.feasible_hits, "screened": self.screened}

    def set_state(self, state: dict[str, Any]) -> None:
        self._cache = {k: _Entry(**v) for k, v in state["cache"].items()}
        self._log = list(state["log"])
        self._best = state["best"]
        self._top = list(state.get("top") or ([state["best"]] if state["best"] else []))
        self._errors = list(state.get("errors", []))
        self.hits = int(state.get("hits", 0))
        self.feasible_hits = int(state.get("feasible_hits", 0))
        self.screened = int(state.get("screened", 0))


def store_actor(name: str):
    """The run's store as a named, detached-free Ray actor (created once), on the
    caller's machine: a measuring machine that leaves the cluster must not take the
    run's measurements with it."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    actor_cls = ray.remote(num_cpus=0, max_restarts=-1)(MeasurementStore)
    return actor_cls.options(name=name, get_if_exists=True, lifetime=None,
                             scheduling_strategy=here).remote()


class StoreClient:
    """Calls a store the same way whether it is a local object or a Ray actor."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.remote = hasattr(store, "get") and hasattr(store.get, "remote")

    def __getattr__(self, name: str):
        fn = getattr(self.store, name)
        if not self.remote:
            return fn
        import ray

        return lambda *a, **k: ray.get(fn.remote(*a, **k))

    @classmethod
    def connect(cls, name: Optional[str], wait_s: float = 30.0) -> "StoreClient":
        """The named actor when Ray runs and ``name`` is set, else a local store.

        The run's driver creates the actor (:func:`store_actor`) before any
        environment connects; a name not registered yet is waited for, never
        created a second time (two actors racing for one name cancel one)."""
        if name:
            import time

            import ray

            if ray.is_initialized():
                deadline = time.monotonic() + wait_s
                while True:
                    try:
                        return cls(ray.get_actor(name))
                    except ValueError:
                        if time.monotonic() > deadline:
                            raise RuntimeError(f"the run's measurement store {name!r} does not "
                                               "exist; environments join a running training run")
                        time.sleep(0.2)
        return cls(MeasurementStore())
