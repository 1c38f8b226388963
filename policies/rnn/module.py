"""The RNN placer as an RLlib ``TorchRLModule`` (new API stack, stateless).

The network is :class:`policies.rnn.policy.RNNPlacerNet`; the observation and action
are HSDAG's (:func:`envs.observation.placement_spaces`: the padded graph, one
device per node), so the method acts in :class:`envs.placement_env.PlacementEnv`
and every step is one whole placement, measured and counted like HSDAG's.

The decoder is autoregressive, so the module samples its actions itself:
``forward_exploration`` decodes a sampled sequence (and grouping) and returns
``Columns.ACTIONS`` with their ``Columns.ACTION_LOGP``; ``forward_inference``
decodes greedily. Both also return the distribution inputs
(:mod:`policies.rnn.distribution`) the sample was drawn from.
``forward_train`` re-scores the batch's actions by teacher forcing (the stored
actions are fed back instead of samples) under the grouping stored with them,
so the learner's ``logp`` of an action equals the sampler's, with gradients.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis import ValueFunctionAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override
from torch import Tensor

from envs.observation import OBS_KEYS, read_placement_spaces
from policies.distributions import unpack_dist_inputs
from policies.layers import mlp
from policies.rnn.policy import PlacerOutput, RNNPlacerConfig, RNNPlacerNet
from policies.rnn.distribution import SequencePlacementDistribution, pack_sequence_inputs

__all__ = ["RNNPlacerRLModule"]


class RNNPlacerRLModule(TorchRLModule, ValueFunctionAPI):
    """The RNN placer's policy over whole placements.

    Spaces: :func:`envs.observation.placement_spaces`. ``model_config`` keys:
    the fields of :class:`~policies.rnn.policy.RNNPlacerConfig` (``hidden_dim``,
    ``grouper``, ``num_groups``, ``out_scale``).
    """

    @override(TorchRLModule)
    def setup(self) -> None:
        self._max_nodes, num_features, _, self._num_devices = read_placement_spaces(
            self.observation_space, self.action_space, type(self).__name__)
        self.rnn_config = RNNPlacerConfig.from_model_config(self.model_config)
        h = self.rnn_config.hidden_dim
        self.net = RNNPlacerNet(num_features, self._num_devices, self.rnn_config)
        self.value_head = mlp(2 * h, h, 1, 2)
        self.action_dist_cls = SequencePlacementDistribution.for_devices(self._num_devices)

    @override(TorchRLModule)
    def _forward_exploration(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        return self._act(self._run(batch))

    @override(TorchRLModule)
    def _forward(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        return self._act(self._run(batch, greedy=True))

    @override(TorchRLModule)
    def _forward_train(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        if Columns.ACTIONS not in batch:
            raise ValueError("RNNPlacerRLModule trains on stored placements: the batch needs "
                             "Columns.ACTIONS to score them by teacher forcing")
        assignment = None
        stored = batch.get(Columns.ACTION_DIST_INPUTS)
        if self.rnn_config.grouper:
            if stored is None:
                raise ValueError("with the grouper, the batch needs the stored action "
                                 "distribution inputs (they carry the sampled grouping)")
            _, assignment = unpack_dist_inputs(torch.as_tensor(stored)[..., :-2], self._num_devices)
        out = self._run(batch, actions=torch.as_tensor(batch[Columns.ACTIONS]), assignment=assignment)
        return {Columns.ACTION_DIST_INPUTS: self._dist_inputs(out), Columns.EMBEDDINGS: out.embedding}

    @override(ValueFunctionAPI)
    def compute_values(self, batch: Dict[str, Any], embeddings: Optional[Any] = None) -> Tensor:
        if embeddings is None:
            embeddings = self._run(batch, greedy=True).embedding
        return self.value_head(embeddings).squeeze(-1)

    # -- internals -------------------------------------------------------------------
    @staticmethod
    def _dist_inputs(out: PlacerOutput) -> Tensor:
        return pack_sequence_inputs(out.node_logits, out.assignment, out.group_logp, out.group_entropy)

    def _act(self, out: PlacerOutput) -> Dict[str, Any]:
        inputs = self._dist_inputs(out)
        logp = self.action_dist_cls.from_logits(inputs).logp(out.actions)
        return {Columns.ACTIONS: out.actions, Columns.ACTION_LOGP: logp,
                Columns.ACTION_DIST_INPUTS: inputs}

    def _run(self, batch: Mapping[str, Any], **kwargs) -> PlacerOutput:
        raw = batch[Columns.OBS]
        if not isinstance(raw, Mapping):
            raise ValueError("RNNPlacerRLModule needs the Dict observation as a dict of tensors; "
                             "do not flatten it (no FlattenObservations connector).")
        obs = {k: torch.as_tensor(raw[k]) for k in OBS_KEYS}
        return self.net(obs["x"], obs["edge_index"], obs["node_mask"], obs["edge_mask"], **kwargs)
