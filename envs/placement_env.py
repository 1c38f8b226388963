"""The placement environment: one graph, a device per node, measured rewards.

Each step the agent proposes a placement of every node; the environment
measures it through any backend (simulator, OpenVINO HETERO, stage pipeline)
and rewards it. An episode is ``episode_len`` placements (the paper: 20); the
observation is the graph's node features with padding masks, the same at
every step (the policy carries its node states from step to step itself).

Rewards (``reward``): ``inverse`` = 1 / latency in seconds (the paper),
``speedup`` = reference latency / latency, ``neg_log`` = -log(latency in
seconds), ``neg_sqrt`` = -sqrt(latency in seconds) (Mirhoseini et al., 2017). A failed measurement (does not compile, times out) is counted and
rewarded as a placement ``failure_factor`` times slower than the reference,
never a crash. With ``memory_penalty="graded"``, a placement that breaks a device's memory limit is rewarded on
a graded scale, ``failure_factor * (1 + over)`` times the reference with
``over`` the bytes above capacity as a fraction of it (as Placeto penalises
memory): when a whole batch overflows, the placements closer to fitting still
rank higher and the policy moves toward feasibility instead of learning
nothing. With ``memory_penalty="repair"`` (the default) and a profile of every device, a
placement the profile says breaks a limit is not measured: its repair
(:func:`hsdag_core.fit.repair`, the nodes that overflow a device moved to
one with room) is measured and rewarded instead, so no measurement is spent
on a placement known not to fit. With ``screen`` above 0 and a profile of
every device, a new placement the run's latency model says is clearly slower
than the run's best is not measured either (:mod:`envs.screen`): it is
rewarded as its predicted latency. Repair, cache, screen, measurement and reward are
those of every method's runs (:class:`envs.measurer.Measurer`).
"""
from __future__ import annotations

import math
import time
from contextlib import contextmanager
from typing import Any, Iterator, Mapping, Optional

import gymnasium as gym
import numpy as np

from envs.base import Measurement
from envs.env_config import MEMORY_PENALTIES, REWARDS, TRANSIENT_STAGES, EnvConfig, reward_of
from envs.incumbent import incumbent, start_placement
from envs.measurer import Measurer
from envs.store import StoreClient, placement_key

__all__ = ["EnvConfig", "PlacementEnv", "REWARDS", "MEMORY_PENALTIES", "TRANSIENT_STAGES", "reward_of",
           "reporting_errors"]


def _node_id() -> Optional[str]:
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    except Exception:  # noqa: BLE001 - outside Ray there is no node
        return None


@contextmanager
def reporting_errors(store: str, doing: str) -> Iterator[None]:
    """Re-raise any exception, after telling the run's store what it was: an
    EnvRunner that fails is restarted by RLlib and its error would otherwise
    stay in a worker's log; the driver quotes it when no EnvRunner can measure."""
    try:
        yield
    except Exception as exc:
        if store:
            try:
                import socket

                text = f"{type(exc).__name__} while {doing} on {socket.gethostname()}: {exc}"
                StoreClient.connect(store).report_error(text.splitlines()[0][:500])
            except Exception:  # noqa: BLE001 - the original error matters, not this one
                pass
        raise


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
        self.config = cfg = EnvConfig.from_dict(config or {})
        with reporting_errors(cfg.store, "building the environment"):
            self._setup(cfg)

    def _setup(self, cfg: EnvConfig) -> None:
        from envs.graph_backend import make_backend
        from hsdag_core.compgraph import parse_input_shapes
        from hsdag_core.features import node_features
        from hsdag_core.device_profile import Profile, cost_graph
        from envs.observation import pad_graph_observation, placement_spaces

        from envs.backends import graph_source

        profile = Profile.from_json(cfg.profile) if cfg.profile else None
        source = graph_source(cfg.backend, profile.source if profile else "")
        model, _, graph, _ = source.build(cfg.model, cfg.coarsen, parse_input_shapes(cfg.input_shape))
        self.model, self.graph = model, graph
        devices = list(cfg.devices) or (profile.device_names if profile else ["CPU"])
        measured = Profile.from_json(cfg.sim_profile) if cfg.sim_profile else profile
        self.backend = make_backend(cfg.backend, graph, model, devices, cfg.timing, measured,
                                    cfg.objective, cfg.sim_delay_s)
        self.devices = list(self.backend.devices)
        #: the cost graph of the run's devices under the profile, which says without
        #: measuring whether a placement fits (hsdag_core.fit; memory_penalty "repair"
        #: repairs to it), or None without a profile of every device
        self.limits = None
        if profile is not None and all(d in profile.devices for d in self.devices):
            self.limits = cost_graph(graph, profile, self.devices)
        times = mem = cap = None
        if profile is not None and (cfg.features.cost or cfg.features.relative):
            cg = self.limits if self.limits is not None else \
                cost_graph(graph, profile, [d for d in self.devices if d in profile.devices])
            times = cg.compute_s
            mem, cap = cg.mem_bytes, cg.mem_capacity
        x, self.feature_names = node_features(graph, cfg.features, times, mem, cap)
        self._incumbent_at = x.shape[1]  # first incumbent column
        if cfg.incumbent:
            x = np.concatenate([x, np.zeros((x.shape[0], len(self.devices)), x.dtype)], axis=1)
            self.feature_names = list(self.feature_names) + [f"incumbent_{d}" for d in self.devices]
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
        screen = None  # the latency model that leaves clearly slower placements unmeasured
        if cfg.screen > 0:
            if self.limits is None or cfg.objective != "sequential":
                raise ValueError("screen predicts latencies of the sequential objective from a "
                                 "profile of every device; the run has "
                                 + ("no such profile" if self.limits is None
                                    else f"the {cfg.objective} objective"))
            from envs.screen import Screen

            screen = Screen(self.limits, self.graph_id, cfg.screen)
        #: repair, cache, measure and reward (:class:`envs.measurer.Measurer`), through the
        #: run's store
        self.measurer = Measurer(self.backend, self.graph_id, graph.num_nodes,
                                 StoreClient.connect(cfg.store or None), self.repair_limits,
                                 failure_factor=cfg.failure_factor, memory_penalty=cfg.memory_penalty,
                                 reward=cfg.reward, screen=screen, node=_node_id)
        self.store, self.screen = self.measurer.store, screen
        self._step = 0
        self._start: Optional[np.ndarray] = None  # where sampling around an incumbent starts
        self._start_checked = False  # measured (or found measured) at this env's first step
        self._wander: Optional[np.random.Generator] = None  # which episodes see the incumbent
        self.reference_kind = ""
        self.single_device_s = {}
        if cfg.measure_reference:
            self.reference_s, self.reference_kind, self.single_device_s = \
                self.measurer.find_reference(self.devices, cfg.reference, graph.name)

    @property
    def backend(self):
        """What measures a placement (:mod:`envs.backends`); setting it sets the measurer's."""
        return self._backend

    @backend.setter
    def backend(self, value) -> None:
        self._backend = value
        if "measurer" in vars(self):
            self.measurer.backend = value

    @property
    def reference_s(self) -> float:
        """The latency failures are rewarded relative to
        (:meth:`envs.measurer.Measurer.find_reference`); NaN when
        the environment was built with ``measure_reference`` off."""
        return self.measurer.reference_s

    @reference_s.setter
    def reference_s(self, value: float) -> None:
        self.measurer.reference_s = value

    @property
    def repair_limits(self):
        """The cost graph an over-memory placement is repaired to before it is measured
        (``memory_penalty`` ``repair`` with a profile of every device), or None."""
        return self.limits if self.config.memory_penalty == "repair" else None

    @property
    def steps_per_episode(self) -> int:
        """Steps of one episode (what an algorithm samples per episode)."""
        return self.config.episode_len

    # ------------------------------------------------------------ measuring
    def measure_array(self, placement: np.ndarray, suggested: bool = False) -> tuple[Measurement, bool]:
        """Measure (or fetch from the run's cache) a placement the policy proposed,
        given as device indices, repaired first (:meth:`envs.measurer.Measurer.measure`);
        it counts towards the run's best. ``suggested``: the driver's suggestion
        (:meth:`_measure_suggested`), never screened."""
        return self.measurer.measure(placement, suggested=suggested)

    def measure_untracked(self, placement: np.ndarray) -> Measurement:
        """Measure a placement that is not the policy's (a baseline or
        reference): never cached, never counted, never the run's best, and
        always timed in full."""
        return self.measurer.measure_untracked(placement)

    # -------------------------------------------------------------- gym API
    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self._step = 0
        if self.config.incumbent:
            if self._wander is None:  # seeded once: RLlib resets with the same seed every time
                self._wander = np.random.default_rng(seed)
            shown = self.config.incumbent_share >= 1 or \
                self._wander.random() < self.config.incumbent_share
            self._obs = self._with_incumbent(shown)
        return self._obs, {}

    def _with_incumbent(self, shown: bool = True) -> dict:
        """The observation with the run's best placement so far as node features
        (a new array: episodes already sampled keep the observation they saw);
        ``shown`` False leaves them zero (an episode sampled without the incumbent)."""
        obs = dict(self._obs)
        x = obs["x"].copy()
        at, d = self._incumbent_at, len(self.devices)
        x[:, at:at + d] = 0.0
        placement = self.incumbent() if shown else None
        if placement is not None:
            x[np.arange(len(placement)), at + placement] = 1.0
        obs["x"] = x
        return obs

    def incumbent(self) -> Optional[np.ndarray]:
        """The placement a policy samples around (:func:`envs.incumbent.incumbent`)."""
        best = self.store.best()
        if best and not str(best.get("key", "")).startswith(self.graph_id + ":"):
            best = None
        return incumbent(best, self._start_placement() if best is None else self._start,
                         self.devices, self.single_device_s, self.graph.num_nodes)

    def _start_placement(self) -> Optional[np.ndarray]:
        """Where the run's sampling starts (:func:`envs.incumbent.start_placement`),
        computed once."""
        if self._start is None:
            self._start = start_placement(self.graph.num_nodes, self.devices, self.single_device_s,
                                          self.repair_limits)
        return self._start

    def reward_latency(self, m: Measurement) -> float:
        """The latency a measurement is rewarded as: its own when it ran, else
        ``failure_factor`` times the reference, graded by how far a placement is
        over the memory limit (see the module docstring)."""
        return self.measurer.reward_latency(m)

    def step(self, action):
        with reporting_errors(self.config.store, "measuring a placement"):
            return self._step_once(action)

    def _measure_start(self) -> None:
        """With incumbent features and a start the profile estimated (a single device
        repaired to fit memory, :func:`envs.incumbent.start_placement`), measure that
        start once, before the run's first placement, as a placement of the run: the
        policy samples around it, so the run's best is never worse than it (what that
        does: docs/results/learning.md, "The incumbent prior and the measured start"). Not
        again when the run has it (a resumed run, another EnvRunner); a run that has
        measured something else first (``--exact-start``, a pre-trained policy's greedy
        placement) measures it too, and samples around the faster."""
        if self._start_checked:
            return
        self._start_checked = True
        if not self.config.incumbent or self.repair_limits is None:
            return
        start = self._start_placement()
        if start is not None and self.store.get(placement_key(self.graph_id, start)) is None:
            self.measure_array(start, suggested=True)

    def _measure_suggested(self) -> None:
        """With ``suggestions``: measure the placement the run's driver queued for this
        graph (``--refit-every``: refit's proposal, :mod:`policies.search.refit_guide`), once,
        as a placement of the run: when it is the run's best, the policy samples
        around it from the next episode on."""
        if not self.config.suggestions:
            return
        p = self.store.take_suggestion(self.graph_id)
        if p is not None:
            self.measure_array(np.asarray(p, dtype=np.int64), suggested=True)

    def _step_once(self, action):
        t0 = time.perf_counter()
        self._measure_start()
        self._measure_suggested()
        m, cached = self.measure_array(np.asarray(action))
        self._step += 1
        latency = self.reward_latency(m)
        reward = reward_of(latency, self.config.reward, self.reference_s)
        best = self.store.best()
        info = {"latency_s": m.latency_s if m.ok else math.nan, "ok": m.ok, "cached": cached,
                "stage": m.stage, "error": m.error, "measure_s": time.perf_counter() - t0,
                "best_latency_s": best["latency_s"] if best else math.nan,
                "memory_over": float(m.info.get("memory_over", 0.0))}
        terminated = self._step >= self.config.episode_len
        return self._obs, float(reward), terminated, False, info
