"""Every measurement of a run in one place: the cache, the best, the log.

A :class:`MeasurementStore` keys measurements by (graph, placement), so a
placement already measured by any EnvRunner is never measured again, keeps
the best feasible placement seen, and logs every new measurement for the
driver to read incrementally. In a Ray run it lives in one named actor
(:func:`store_actor`) shared by all EnvRunners; in tests and single-process
use it is a plain object. Both expose the same methods.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

__all__ = ["MeasurementStore", "StoreClient", "placement_key", "store_actor"]


def placement_key(graph_id: str, placement: np.ndarray) -> str:
    """A short stable key for a placement (device index per node) of a graph."""
    p = np.ascontiguousarray(np.asarray(placement, dtype=np.int16))
    return graph_id + ":" + hashlib.blake2b(p.tobytes(), digest_size=12).hexdigest()


@dataclass
class _Entry:
    latency_s: float
    ok: bool
    info: dict[str, Any]


class MeasurementStore:
    """Cache, best-so-far and log of a run's measurements."""

    def __init__(self) -> None:
        self._cache: dict[str, _Entry] = {}
        self._log: list[dict[str, Any]] = []
        self._best: Optional[dict[str, Any]] = None
        self.hits = 0

    def get(self, key: str) -> Optional[dict[str, Any]]:
        """The cached result for ``key`` (and count a hit), or None."""
        e = self._cache.get(key)
        if e is None:
            return None
        self.hits += 1
        return {"latency_s": e.latency_s, "ok": e.ok, "info": e.info}

    def put(self, key: str, latency_s: float, ok: bool, placement: list[int],
            info: Optional[dict[str, Any]] = None) -> bool:
        """Record a new measurement; return True if it is the best so far."""
        info = dict(info or {})
        self._cache[key] = _Entry(latency_s, ok, info)
        self._log.append({"key": key, "latency_s": latency_s, "ok": ok, **{
            k: v for k, v in info.items() if k in ("stage", "error", "runner")}})
        if ok and math.isfinite(latency_s) and (self._best is None or latency_s < self._best["latency_s"]):
            self._best = {"latency_s": latency_s, "placement": list(map(int, placement)), "key": key,
                          "index": len(self._log) - 1}
            return True
        return False

    def log_since(self, start: int) -> list[dict[str, Any]]:
        """Measurements recorded from index ``start`` on."""
        return self._log[start:]

    def best(self) -> Optional[dict[str, Any]]:
        return None if self._best is None else dict(self._best)

    def stats(self) -> dict[str, Any]:
        failures = sum(1 for e in self._log if not e["ok"])
        return {"measurements": len(self._log), "failures": failures, "cache_hits": self.hits,
                "placements": len(self._log) + self.hits,
                "best_latency_s": None if self._best is None else self._best["latency_s"]}

    def get_state(self) -> dict[str, Any]:
        return {"cache": {k: vars(e) for k, e in self._cache.items()}, "log": self._log,
                "best": self._best, "hits": self.hits}

    def set_state(self, state: dict[str, Any]) -> None:
        self._cache = {k: _Entry(**v) for k, v in state["cache"].items()}
        self._log = list(state["log"])
        self._best = state["best"]
        self.hits = int(state.get("hits", 0))


def store_actor(name: str):
    """The run's store as a named, detached-free Ray actor (created once)."""
    import ray

    actor_cls = ray.remote(num_cpus=0, max_restarts=-1)(MeasurementStore)
    return actor_cls.options(name=name, get_if_exists=True, lifetime=None).remote()


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
    def connect(cls, name: Optional[str]) -> "StoreClient":
        """The named actor when Ray runs and ``name`` is set, else a local store."""
        if name:
            import ray

            if ray.is_initialized():
                try:
                    return cls(ray.get_actor(name))
                except ValueError:
                    return cls(store_actor(name))
        return cls(MeasurementStore())
