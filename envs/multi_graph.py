"""One policy over many graphs: a graph drawn per episode.

:class:`MultiGraphEnv` holds one placement environment per graph (any
environment class observing the padded graph of :mod:`envs.observation`:
:class:`~envs.placement_env.PlacementEnv` for HSDAG,
:class:`~envs.placeto_env.PlacetoEnv` for Placeto, or another method's) and
at every ``reset`` draws the graph of the next episode, uniformly with its own
seeded generator. Every graph keeps its own backend and profile, its own
reference latency (rewards stay scale-free across graphs of very different
latencies only with the ``speedup`` reward or Placeto's improvement over the
reference), and its own measurement store, so the cache, the best placement
and the counts are per graph (:meth:`MultiGraphEnv.graph_stats`). All graphs
are padded to the largest of the set, so observation and action spaces are
the same for every graph and one network acts on all of them.

Config (a mapping): ``graphs``, a list of per-graph environment configs
(each an :class:`~envs.placement_env.EnvConfig` mapping, plus the
environment's own settings such as Placeto's ``passes``); ``env_class``,
``"pkg.mod:Class"`` of the per-graph environment; ``seed``. Padding
(``max_nodes`` / ``max_edges``) is taken from the configs when set, else
computed from the graphs' sizes (:func:`padding_of`).
"""
from __future__ import annotations

import importlib
from typing import Any, Mapping, Optional, Sequence

import gymnasium as gym
import numpy as np

__all__ = ["MultiGraphEnv", "padding_of", "DEFAULT_ENV_CLASS"]

DEFAULT_ENV_CLASS = "envs.placement_env:PlacementEnv"


def _load(target: str):
    mod, _, attr = target.partition(":")
    return getattr(importlib.import_module(mod), attr)


def padding_of(graph_configs: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """``(max_nodes, max_edges)`` over the graphs of ``graph_configs`` (built once)."""
    from hsdag_core.coarsening import build_graph
    from hsdag_core.compgraph import parse_input_shapes

    n = e = 1
    for c in graph_configs:
        _, _, g, _ = build_graph(c["model"], c.get("coarsen", "colocation"),
                                 parse_input_shapes(c.get("input_shape", "")))
        n, e = max(n, g.num_nodes), max(e, g.edge_index().shape[1])
    return n, e


class MultiGraphEnv(gym.Env):
    """Episodes over a set of graphs, one graph per episode (see the module docstring).

    ``info`` of every step has what the per-graph environment's has, plus
    ``graph`` (the index of the episode's graph in ``graphs``).
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, config: Optional[Mapping[str, Any]] = None) -> None:
        config = dict(config or {})
        graphs = list(config.get("graphs") or [])
        if not graphs:
            raise ValueError("MultiGraphEnv needs a non-empty list of per-graph configs in 'graphs'")
        env_cls = _load(config.get("env_class") or DEFAULT_ENV_CLASS)
        if not all(c.get("max_nodes") and c.get("max_edges") for c in graphs):
            n, e = padding_of(graphs)
            graphs = [{**c, "max_nodes": n, "max_edges": e} for c in graphs]
        self.envs = [env_cls(c) for c in graphs]
        first = self.envs[0]
        for env in self.envs[1:]:
            if env.observation_space != first.observation_space or env.action_space != first.action_space:
                raise ValueError(
                    f"graph {env.graph.name} is observed as {env.observation_space} / "
                    f"{env.action_space}, unlike {first.graph.name} ({first.observation_space} / "
                    f"{first.action_space}); every graph needs the same devices, features and padding")
        self.observation_space, self.action_space = first.observation_space, first.action_space
        self.devices = first.devices
        self.max_nodes, self.max_edges = first.max_nodes, first.max_edges
        self._rng = np.random.default_rng(int(config.get("seed", 0)))
        self._seeded = False
        self.current = 0

    @property
    def env(self):
        """The environment of the current episode's graph."""
        return self.envs[self.current]

    @property
    def graph(self):
        return self.env.graph

    @property
    def steps_per_episode(self) -> int:
        """The mean episode length over the graphs (episodes may differ in length)."""
        return max(1, int(round(np.mean([e.steps_per_episode for e in self.envs]))))

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        if seed is not None and not self._seeded:
            # only the first seed counts: RLlib resets with the same seed at every
            # sample() call, and the same graph would be drawn every time
            self._rng, self._seeded = np.random.default_rng(seed), True
        self.current = int(self._rng.integers(len(self.envs)))
        obs, info = self.env.reset(seed=seed, options=options)
        return obs, {**info, "graph": self.current}

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, {**info, "graph": self.current}

    def graph_stats(self) -> list[dict[str, Any]]:
        """Per graph: its name, node count, reference latency and its store's counts and best."""
        out = []
        for env in self.envs:
            stats = env.store.stats()
            out.append({"graph": env.graph.name, "nodes": env.graph.num_nodes,
                        "reference_s": env.reference_s, **stats})
        return out
