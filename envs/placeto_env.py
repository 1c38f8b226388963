"""Placeto's MDP (Addanki et al., NeurIPS 2019): place one node per step, reward the improvement.

An episode starts from an initial placement and walks the graph's nodes in a
fixed topological order, ``passes`` times; step ``t`` moves node
``order[t mod n]`` to the device the action names (``Discrete(D)``), the whole
placement is evaluated again, and the reward is the improvement::

    r_t = (T_{t-1} - T_t) / T_ref

with ``T_t`` the runtime the placement after step ``t`` is rewarded as,
``T_0`` the initial placement's and ``T_ref`` the run's reference latency
(the best single device by default), so rewards are scale-free and the
episode's rewards add up to ``(T_0 - T_final) / T_ref``. A placement that
fails (does not fit a device's memory, does not compile, times out) is
evaluated as :meth:`PlacementEnv.reward_latency` says: ``failure_factor``
times the reference (graded by the memory overflow where the backend reports
it), as HSDAG's environment does. An episode is ``n * passes`` steps
(:attr:`PlacetoEnv.steps_per_episode`). Placeto's reward does not depend on
the run's ``reward`` setting (1/latency, speedup, -log latency): its reward is
the runtime improvement itself.

Every evaluation is a placement of the run: it goes through the run's shared
measurement store (:meth:`PlacementEnv.measure_array`), so a placement seen
before is read from the cache and not measured again, and it counts towards
the budget exactly as each of HSDAG's placements does.

Initial placement: a random one, as the paper does (its code draws one random
placement with a fixed seed and starts every episode from it). It is the same
for every episode and every EnvRunner (``initial_seed``), so the returns at one
step index of different episodes compare like with like (the per-step
baseline of :mod:`policies.placeto.learner` averages them), and a random start
shows the policy every node on every device about equally often from the first
episode on. It is measured once when the environment is built, outside the
run's placements, like the single-device references.

Observation (padded like :mod:`envs.observation`, see :func:`placeto_spaces`):
per node ``x`` holds

* runtime: with cost features on and a profile, ``log1p`` of the node's
  profiled time on each device in ms (the profile's cost graph); otherwise
  (``no_cost``, or no profile) ``log1p`` of its FLOP estimate in MFLOP. So
  ``no_cost`` means what it means for every method: no profiled time is seen;
  Placeto then reads FLOPs and bytes only;
* output size and weight size: ``log1p`` of the bytes in MB (static properties
  of the graph, never profiled);
* with ``relative_features``, the scale-free costs of
  :func:`hsdag_core.features.relative_features`;
* the current device, one-hot over ``D``;
* visited (the node was placed in this episode) and current (the node placed
  now) flags;
* start time in the last evaluation, over ``T_ref``: from the simulator's
  schedule of the current placement (:meth:`envs.simulator.Simulator.start_times`:
  the sequential objective's stage order or the parallel objective's list
  schedule; ``throughput`` has no schedule and gives 0); a real backend
  reports no per-node times, so it is 0 there.

plus ``current`` (the current node's index) and the current node's
``ancestors`` and ``descendants`` as masks over the nodes. The DAG's
transitive closure is computed once per environment as packed bit rows
(:class:`hsdag_core.reach.Reachability`, ``n * n / 4`` bytes) and each
step carries only the current node's two rows (``2 * N_max`` bytes), so the
memory of an observation stays linear in the graph's size.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, fields
from typing import Any, Dict, Mapping, Optional

import gymnasium as gym
import numpy as np

from envs.placement_env import EnvConfig, PlacementEnv

__all__ = ["PlacetoSettings", "PlacetoEnv", "placeto_spaces", "PLACETO_OBS_KEYS"]

#: the keys of a Placeto observation
PLACETO_OBS_KEYS = ("x", "edge_index", "node_mask", "edge_mask", "current", "ancestors",
                    "descendants")


@dataclass(frozen=True)
class PlacetoSettings:
    """Placeto's own environment settings (beside :class:`EnvConfig`).

    Attributes:
        passes: times each node is visited in an episode (the paper's ``n``).
        initial_seed: seed of the random initial placement every episode starts from.
    """

    passes: int = 1
    initial_seed: int = 0

    def __post_init__(self) -> None:
        if self.passes < 1:
            raise ValueError("passes must be at least 1")


def placeto_spaces(max_nodes: int, max_edges: int, num_features: int,
                   num_devices: int) -> tuple[gym.spaces.Dict, gym.spaces.Discrete]:
    """Placeto's observation and action spaces.

    Returns:
        ``(Dict(x: Box[N_max, F] float32, edge_index: Box[2, E_max] int64,
        node_mask: Box[N_max], edge_mask: Box[E_max], current: Box[1] int64 in
        [0, N_max), ancestors: Box[N_max] uint8 in {0, 1}, descendants: Box[N_max]
        uint8 in {0, 1}), Discrete(D))``.
    """
    from envs.observation import placement_spaces

    base, _ = placement_spaces(max_nodes, max_edges, num_features, num_devices)
    spaces = dict(base.spaces)
    spaces["current"] = gym.spaces.Box(0, max_nodes - 1, (1,), np.int64)
    spaces["ancestors"] = gym.spaces.Box(0, 1, (max_nodes,), np.uint8)
    spaces["descendants"] = gym.spaces.Box(0, 1, (max_nodes,), np.uint8)
    return gym.spaces.Dict(spaces), gym.spaces.Discrete(num_devices)


class PlacetoEnv(PlacementEnv):
    """Placeto's per-node MDP over one graph (see the module docstring).

    ``config``: an :class:`EnvConfig` or a mapping of its fields, which may also
    hold the fields of :class:`PlacetoSettings` (``passes``, ``initial_seed``).
    ``info`` of every step has what :class:`PlacementEnv`'s has, plus ``node``
    (the node placed) and ``runtime_s`` (the runtime the placement is
    rewarded as).
    """

    def __init__(self, config: Optional[Mapping[str, Any] | EnvConfig] = None) -> None:
        from hsdag_core.reach import Reachability, topological_order

        config = config or {}
        own = {f.name for f in fields(PlacetoSettings)}
        if isinstance(config, EnvConfig):
            self.settings = PlacetoSettings()
        else:
            self.settings = PlacetoSettings(**{k: v for k, v in config.items() if k in own})
            config = {k: v for k, v in config.items() if k not in own}
        super().__init__(config)
        g = self.graph
        n, D = g.num_nodes, len(self.devices)
        ei = g.edge_index()
        self.order = topological_order(ei, n)
        self.reach = Reachability.of(ei, n)
        self._static, static_names = self._static_features()
        self.feature_names = static_names + [f"on_{d}" for d in self.devices] + [
            "visited", "current", "start_time"]
        self.observation_space, self.action_space = placeto_spaces(
            self.max_nodes, self.max_edges, len(self.feature_names), D)
        self._edges = self._obs["edge_index"]
        self._node_mask, self._edge_mask = self._obs["node_mask"], self._obs["edge_mask"]
        rng = np.random.default_rng(self.settings.initial_seed)
        self.initial_placement = rng.integers(0, D, size=n).astype(np.int64)
        self.placement = self.initial_placement.copy()
        self.visited = np.zeros(n, dtype=bool)
        self.initial_runtime_s = math.nan
        self.start_s = np.zeros(n, dtype=np.float32)
        if self.config.measure_reference:  # a copy that only describes the graph measures nothing
            self.initial_runtime_s = self.reward_latency(self.measure_untracked(self.initial_placement))
            self.start_s = self._start_times()
        self.runtime_s = self.initial_runtime_s

    @property
    def steps_per_episode(self) -> int:
        """``n_nodes * passes``: one step per node and pass."""
        return self.graph.num_nodes * self.settings.passes

    @property
    def current_node(self) -> int:
        """The node the next step places."""
        return int(self.order[self._step % self.graph.num_nodes])

    # ------------------------------------------------------------- features
    def _static_features(self) -> tuple[np.ndarray, list[str]]:
        """``[n, F_s]`` runtime, output size and weight size (see the module docstring)."""
        from hsdag_core.device_profile import Profile, cost_graph

        g, cfg = self.graph, self.config
        cols: list[np.ndarray] = []
        names: list[str] = []
        profile = Profile.from_json(cfg.profile) if cfg.profile else None
        cg = None  # the profile's costs, for the cost and the relative columns
        if ((cfg.features.cost or cfg.features.relative) and profile is not None
                and all(d in profile.devices for d in self.devices)):
            cg = cost_graph(g, profile, self.devices)
        if cfg.features.cost and cg is not None:
            t = np.where(np.isfinite(cg.compute_s), cg.compute_s, 1e3)
            cols.append(np.log1p(t * 1e3))
            names += [f"log_ms_{d}" for d in self.devices]
        else:
            cols.append(np.log1p(np.array([[nd.flops / 1e6] for nd in g.nodes])))
            names.append("log_mflops")
        cols.append(np.log1p(np.array([[nd.bytes_written / 1e6, nd.weight_bytes / 1e6]
                                       for nd in g.nodes])))
        names += ["log_mb_out", "log_mb_weights"]
        if cfg.features.relative and cg is not None:
            from hsdag_core.features import relative_features

            rel, rel_names = relative_features(cg.compute_s, cg.mem_bytes, cg.mem_capacity)
            cols.append(rel)
            names += rel_names
        return np.concatenate(cols, axis=1).astype(np.float32), names

    def _start_times(self) -> np.ndarray:
        """``[n]`` start times of the current placement over ``T_ref`` (0 without a schedule)."""
        sim = self.backend.sim
        if sim is None:
            return np.zeros(self.graph.num_nodes, dtype=np.float32)
        s = sim.start_times(self.placement, self.backend.objective) / self.reference_s
        return np.where(np.isfinite(s), s, 0.0).astype(np.float32)

    def observation(self) -> Dict[str, np.ndarray]:
        """The observation before the next step (see :func:`placeto_spaces`)."""
        g = self.graph
        n, D, N = g.num_nodes, len(self.devices), self.max_nodes
        cur = self.current_node
        x = np.zeros((N, len(self.feature_names)), dtype=np.float32)
        s = self._static.shape[1]
        x[:n, :s] = self._static
        x[np.arange(n), s + self.placement] = 1.0
        x[:n, s + D] = self.visited
        x[cur, s + D + 1] = 1.0
        x[:n, s + D + 2] = self.start_s
        anc = np.zeros(N, dtype=np.uint8)
        desc = np.zeros(N, dtype=np.uint8)
        anc[:n] = self.reach.ancestors(cur)
        desc[:n] = self.reach.descendants(cur)
        return {"x": x, "edge_index": self._edges, "node_mask": self._node_mask,
                "edge_mask": self._edge_mask, "current": np.array([cur], dtype=np.int64),
                "ancestors": anc, "descendants": desc}

    # -------------------------------------------------------------- gym API
    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        gym.Env.reset(self, seed=seed)
        self._step = 0
        self.placement = self.initial_placement.copy()
        self.visited[:] = False
        self.runtime_s = self.initial_runtime_s
        self.start_s = self._start_times()
        return self.observation(), {}

    def _advance(self, node: int) -> None:
        """``node`` (its device already set) is placed: on to the next step."""
        self.visited[node] = True
        self._step += 1
        self.start_s = self._start_times()

    def place_unmeasured(self, device: int) -> Dict[str, np.ndarray]:
        """Teacher forcing: place the current node on ``device`` as a step does, but
        measure nothing (no reward; e.g. walking a known placement to imitate it);
        returns the next observation."""
        node = self.current_node
        self.placement[node] = int(device)
        self._advance(node)
        return self.observation()

    def _step_once(self, action):
        t0 = time.perf_counter()
        self._measure_suggested()
        node = self.current_node
        device = int(np.asarray(action).reshape(-1)[0])
        if not 0 <= device < len(self.devices):
            raise ValueError(f"action {device} is not a device index in [0, {len(self.devices)})")
        self.placement[node] = device
        m, cached = self.measure_array(self.placement)
        runtime = self.reward_latency(m)
        reward = (self.runtime_s - runtime) / self.reference_s
        self.runtime_s = runtime
        self._advance(node)
        best = self.store.best()
        info = {"latency_s": m.latency_s if m.ok else math.nan, "ok": m.ok, "cached": cached,
                "stage": m.stage, "error": m.error, "measure_s": time.perf_counter() - t0,
                "best_latency_s": best["latency_s"] if best else math.nan, "node": node,
                "runtime_s": runtime}
        terminated = self._step >= self.steps_per_episode
        return self.observation(), float(reward), terminated, False, info
