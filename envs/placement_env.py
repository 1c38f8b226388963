"""The placement environment: one graph, a device per node, measured rewards.

Each step the agent proposes a placement of every node; the environment
measures it through any backend (simulator, OpenVINO HETERO, stage pipeline)
and rewards it. An episode is ``episode_len`` placements (the paper: 20); the
observation is the graph's node features with padding masks, the same at
every step (the policy carries its node states from step to step itself).

Rewards (``reward``): ``inverse`` = 1 / latency in seconds (the paper),
``speedup`` = reference latency / latency, ``neg_log`` = -log(latency in
seconds). A failed measurement (does not compile, breaks a memory limit,
times out) is counted and rewarded as a placement ``failure_factor`` times
slower than the reference, never a crash.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping, Optional

import gymnasium as gym
import numpy as np

from envs.base import Measurement, TimingConfig
from envs.store import StoreClient, placement_key
from hsdag_ray.core.features import FeatureConfig

__all__ = ["EnvConfig", "PlacementEnv", "REWARDS", "reward_of"]

REWARDS = ("inverse", "speedup", "neg_log")


@dataclass
class EnvConfig:
    """What one placement environment measures and how it rewards.

    Attributes:
        model: zoo name or model file.
        coarsen: ``none``, ``colocation`` or ``openvino``.
        backend: ``simulator``, ``auto``, ``hetero`` or ``pipeline``.
        devices: device names (real/virtual OpenVINO devices, or profile devices).
        profile: a profile as a JSON dict (the simulator needs one).
        objective: simulator objective.
        reward: one of :data:`REWARDS`.
        episode_len: placements per episode.
        failure_factor: a failed placement is rewarded as this many times the
            reference latency.
        reference: ``best_single`` (fastest single device) or a device name:
            the latency speedups and the ``speedup`` reward are relative to.
        features: node-feature switches (the paper's ablation).
        timing: timing of real measurements.
        max_nodes / max_edges: padding of the observation (0 = the graph's size).
        store: name of the run's shared measurement store actor ("" = local).
    """

    model: str = "resnet50"
    coarsen: str = "colocation"
    backend: str = "simulator"
    devices: tuple[str, ...] = ()
    profile: Optional[dict] = None
    objective: str = "sequential"
    reward: str = "inverse"
    episode_len: int = 20
    failure_factor: float = 10.0
    reference: str = "best_single"
    features: FeatureConfig = field(default_factory=FeatureConfig)
    timing: TimingConfig = field(default_factory=TimingConfig)
    max_nodes: int = 0
    max_edges: int = 0
    store: str = ""

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "EnvConfig":
        if isinstance(d, EnvConfig):
            return d
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown environment setting(s) {', '.join(unknown)}")
        kw = dict(d)
        if isinstance(kw.get("features"), Mapping):
            kw["features"] = FeatureConfig(**kw["features"])
        if isinstance(kw.get("timing"), Mapping):
            kw["timing"] = TimingConfig(**kw["timing"])
        if "devices" in kw:
            kw["devices"] = tuple(kw["devices"])
        cfg = cls(**kw)
        if cfg.reward not in REWARDS:
            raise ValueError(f"unknown reward {cfg.reward!r}; choose one of {', '.join(REWARDS)}")
        if cfg.episode_len < 1:
            raise ValueError("episode_len must be at least 1")
        return cfg

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def reward_of(latency_s: float, kind: str, reference_s: float) -> float:
    """The reward of a placement of latency ``latency_s``."""
    if kind == "inverse":
        return 1.0 / latency_s
    if kind == "speedup":
        return reference_s / latency_s
    if kind == "neg_log":
        return -math.log(latency_s)
    raise ValueError(f"unknown reward {kind!r}; choose one of {', '.join(REWARDS)}")


class PlacementEnv(gym.Env):
    """A gymnasium environment over one computation graph.

    Observation: ``Dict(x, edge_index, node_mask, edge_mask)`` padded to
    ``max_nodes`` / ``max_edges`` (see :func:`envs.observation.placement_spaces`).
    Action: a device index per (padded) node; padded entries are ignored.
    ``info`` of every step has ``latency_s`` (NaN on failure), ``ok``,
    ``cached``, ``stage`` and ``error`` of a failure, and ``best_latency_s``.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, config: Optional[Mapping[str, Any] | EnvConfig] = None) -> None:
        from envs.graph_backend import make_backend
        from hsdag_ray.core.graph import build_graph
        from hsdag_ray.core.features import node_features
        from hsdag_ray.core.profile import Profile, cost_graph
        from envs.observation import pad_graph_observation, placement_spaces

        self.config = cfg = EnvConfig.from_dict(config or {})
        model, _, graph, _ = build_graph(cfg.model, cfg.coarsen)
        self.graph = graph
        profile = Profile.from_json(cfg.profile) if cfg.profile else None
        devices = list(cfg.devices) or (profile.device_names if profile else ["CPU"])
        self.backend = make_backend(cfg.backend, graph, model, devices, cfg.timing, profile,
                                    cfg.objective)
        self.devices = list(self.backend.devices)
        times = None
        if profile is not None and cfg.features.cost:
            times = cost_graph(graph, profile, [d for d in self.devices if d in profile.devices]).compute_s
        x, self.feature_names = node_features(graph, cfg.features, times)
        n, m = graph.num_nodes, graph.edge_index().shape[1]
        self.max_nodes = cfg.max_nodes or n
        self.max_edges = cfg.max_edges or max(m, 1)
        if n > self.max_nodes or m > self.max_edges:
            raise ValueError(f"graph {graph.name} has {n} nodes / {m} edges, more than the padding "
                             f"{self.max_nodes} / {self.max_edges}")
        self.observation_space, self.action_space = placement_spaces(
            self.max_nodes, self.max_edges, x.shape[1], len(self.devices))
        self._obs = pad_graph_observation(x, graph.edge_index(), self.max_nodes, self.max_edges)
        self.graph_id = f"{graph.name}/{cfg.coarsen}/{cfg.backend}/{cfg.objective}/{','.join(self.devices)}"
        self.store = StoreClient.connect(cfg.store or None)
        self._step = 0
        self.reference_s, self.single_device_s = self._reference()

    @property
    def steps_per_episode(self) -> int:
        """Steps of one episode (what an algorithm samples per episode)."""
        return self.config.episode_len

    # ------------------------------------------------------------ measuring
    def measure_array(self, placement: np.ndarray) -> tuple[Measurement, bool]:
        """Measure (or fetch from the run's cache) a placement the policy proposed,
        given as device indices; it counts towards the run's best."""
        p = np.asarray(placement, dtype=np.int64)[: self.graph.num_nodes]
        key = placement_key(self.graph_id, p)
        hit = self.store.get(key)
        if hit is not None:
            m = Measurement(ok=hit["ok"], latency_s=hit["latency_s"], backend=self.backend.name,
                            stage=hit["info"].get("stage"), error=hit["info"].get("error"))
            return m, True
        m = self.measure_untracked(p)
        info = {"stage": m.stage, "error": m.error} if not m.ok else {}
        self.store.put(key, m.latency_s if m.ok else math.inf, m.ok, p.tolist(), info)
        return m, False

    def measure_untracked(self, placement: np.ndarray) -> Measurement:
        """Measure a placement that is not the policy's (a baseline or
        reference): never cached, never counted, never the run's best."""
        p = np.asarray(placement, dtype=np.int64)[: self.graph.num_nodes]
        if hasattr(self.backend, "measure_array"):
            return self.backend.measure_array(p)
        return self.backend.measure({nm: self.devices[int(d)] for nm, d in zip(self.graph.names, p)})

    def _reference(self) -> tuple[float, dict[str, float]]:
        singles = {}
        for d, name in enumerate(self.devices):
            m = self.measure_untracked(np.full(self.graph.num_nodes, d))
            singles[name] = m.latency_s if m.ok else math.inf
        if self.config.reference == "best_single":
            ref = min(singles.values())
        elif self.config.reference in singles:
            ref = singles[self.config.reference]
        else:
            raise ValueError(f"reference {self.config.reference!r} is neither best_single nor a device "
                             f"({', '.join(self.devices)})")
        if not math.isfinite(ref):
            # no single device can hold the model: measure relative to a balanced split
            m = self.measure_untracked(np.arange(self.graph.num_nodes) * len(self.devices)
                                       // self.graph.num_nodes)
            ref = m.latency_s if m.ok else 1.0
        return ref, singles

    # -------------------------------------------------------------- gym API
    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self._step = 0
        return self._obs, {}

    def reward_latency(self, m: Measurement) -> float:
        """The latency a measurement is rewarded as: its own when it ran, else
        ``failure_factor`` times the reference, graded by how far a placement is
        over the memory limit (see the module docstring)."""
        if m.ok:
            return m.latency_s
        over = float(m.info.get("memory_over", 0.0)) if m.stage == "memory" else 0.0
        return self.config.failure_factor * self.reference_s * (1.0 + over)

    def step(self, action):
        t0 = time.perf_counter()
        m, cached = self.measure_array(np.asarray(action))
        self._step += 1
        latency = self.reward_latency(m)
        reward = reward_of(latency, self.config.reward, self.reference_s)
        best = self.store.best()
        info = {"latency_s": m.latency_s if m.ok else math.nan, "ok": m.ok, "cached": cached,
                "stage": m.stage, "error": m.error, "measure_s": time.perf_counter() - t0,
                "best_latency_s": best["latency_s"] if best else math.nan}
        terminated = self._step >= self.config.episode_len
        return self._obs, float(reward), terminated, False, info
