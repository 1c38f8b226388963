"""Placeto as an RLlib ``TorchRLModule`` (new API stack, stateless).

The network is :class:`policies.placeto.policy.PlacetoNet`; this module reads the
padded Placeto observation (:func:`envs.placeto_env.placeto_spaces`), turns a
batch of observations into one disjoint union of graphs
(:func:`envs.observation.unpad_graphs`) and returns a categorical over the
devices for each observation's current node. It keeps no state between steps:
everything Placeto needs (current placement, visited and current flags, start
times, the current node's ancestors and descendants) is in the observation.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

import gymnasium as gym
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import TorchCategorical
from ray.rllib.core.rl_module.apis import ValueFunctionAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override
from torch import Tensor

from envs.observation import unpad_graphs
from envs.placeto_env import PLACETO_OBS_KEYS
from policies.layers import mlp
from policies.placeto.policy import PlacetoConfig, PlacetoNet, PlacetoOutput

__all__ = ["PlacetoRLModule"]


class PlacetoRLModule(TorchRLModule, ValueFunctionAPI):
    """Placeto's policy over one current node per observation.

    Spaces: :func:`envs.placeto_env.placeto_spaces` (``Dict`` observation,
    ``Discrete(D)`` action). ``model_config`` keys: the fields of
    :class:`~policies.placeto.policy.PlacetoConfig` (``hidden_dim``, ``rounds``).

    Outputs: ``Columns.ACTION_DIST_INPUTS`` ``[B, D]`` logits (a
    ``TorchCategorical``); ``forward_train`` adds ``Columns.EMBEDDINGS``
    ``[B, 4H]`` (the policy MLP's input), which :meth:`compute_values` reuses
    (so PPO can train it too).
    """

    @override(TorchRLModule)
    def setup(self) -> None:
        obs, act = self.observation_space, self.action_space
        if not isinstance(obs, gym.spaces.Dict) or not set(PLACETO_OBS_KEYS) <= set(obs.spaces):
            raise ValueError("PlacetoRLModule needs the observation space of "
                             "envs.placeto_env.placeto_spaces (keys "
                             f"{', '.join(PLACETO_OBS_KEYS)}); got {obs}")
        if not isinstance(act, gym.spaces.Discrete):
            raise ValueError(f"PlacetoRLModule places one node per step and needs a Discrete(D) "
                             f"action space; got {act}")
        self._max_nodes, num_features = obs["x"].shape
        self.placeto_config = PlacetoConfig.from_model_config(self.model_config)
        h = self.placeto_config.hidden_dim
        self.net = PlacetoNet(num_features, int(act.n), self.placeto_config)
        self.value_head = mlp(4 * h, h, 1, 2)
        self.action_dist_cls = TorchCategorical

    @override(TorchRLModule)
    def _forward(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        return {Columns.ACTION_DIST_INPUTS: self._run(batch).logits}

    @override(TorchRLModule)
    def _forward_train(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        out = self._run(batch)
        return {Columns.ACTION_DIST_INPUTS: out.logits, Columns.EMBEDDINGS: out.embedding}

    @override(ValueFunctionAPI)
    def compute_values(self, batch: Dict[str, Any], embeddings: Optional[Any] = None) -> Tensor:
        if embeddings is None:
            embeddings = self._run(batch).embedding
        return self.value_head(embeddings).squeeze(-1)

    def _run(self, batch: Mapping[str, Any]) -> PlacetoOutput:
        raw = batch[Columns.OBS]
        if not isinstance(raw, Mapping):
            raise ValueError("PlacetoRLModule needs the Dict observation as a dict of tensors; "
                             "do not flatten it (no FlattenObservations connector).")
        obs = {k: torch.as_tensor(raw[k]) for k in PLACETO_OBS_KEYS}
        g = unpad_graphs(obs["x"].float(), obs["edge_index"], obs["node_mask"], obs["edge_mask"])
        flat_valid = g.node_valid.reshape(-1)
        current = obs["current"].long().reshape(g.num_graphs)
        slot = torch.arange(g.num_graphs, device=current.device) * self._max_nodes + current
        if bool(((current < 0) | (current >= self._max_nodes)).any()) or not bool(flat_valid[slot].all()):
            raise ValueError("an observation's current node is a padded slot or outside "
                             f"[0, {self._max_nodes}); current must name a real node")
        union_id = torch.cumsum(flat_valid.long(), 0) - 1
        return self.net(g.x, g.edge_index, g.batch, g.num_graphs, union_id[slot],
                        obs["ancestors"].reshape(-1)[flat_valid],
                        obs["descendants"].reshape(-1)[flat_valid])
