"""GDP as an RLlib ``TorchRLModule`` (new API stack, stateless, trained with PPO).

The network is :class:`policies.gdp.policy.GDPNet`; this module reads the padded
placement observation (:mod:`envs.observation`, the same as HSDAG's), places
every node in one shot (one action = one device per node) and gives PPO its
value (``ValueFunctionAPI``) from the graph embedding. Each step of an episode
is an independent one-shot placement of the same graph, so PPO runs with
``gamma = 0`` and ``lambda = 0`` (:mod:`hsdag_ray.run.algos`): a step's advantage
is its reward minus the value of the graph.

The action distribution is :class:`policies.distributions.GroupedPlacementDistribution`
with every node a group of its own: one categorical per node, vectorised over
tens of thousands of nodes (``logp``, ``entropy`` and ``kl`` are sums over the
real nodes; padded nodes take the dummy action 0).
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis import ValueFunctionAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override
from torch import Tensor

from envs.observation import OBS_KEYS, read_placement_spaces, unpad_graphs
from policies.distributions import PADDED_GROUP, GroupedPlacementDistribution, pack_dist_inputs
from policies.gdp.policy import GDPConfig, GDPNet
from policies.layers import mlp

__all__ = ["GDPRLModule", "unique_observations"]


def unique_observations(obs: Mapping[str, Tensor], max_distinct: int = 16
                        ) -> Tuple[Dict[str, Tensor], Optional[Tensor]]:
    """The distinct observations of a batch and where each row came from.

    A batch repeats the same observation at every step of an episode (and a
    multi-graph batch holds a few graphs, each for whole episodes); the
    network is deterministic given an observation, so it runs once per
    distinct one and the results are gathered back: exact, gradients included.
    Rows are compared exactly (``torch.equal``); a batch with more than
    ``max_distinct`` distinct observations is left as it is.

    Returns:
        ``(observations, index)``: ``index [B]`` maps rows to the returned
        observations, or ``None`` when nothing was collapsed.
    """
    b = obs["x"].shape[0]
    if b < 2:
        return dict(obs), None
    reps: list[int] = []
    index = []
    for i in range(b):
        # the latest distinct observation first: rows of one episode are consecutive
        for j in range(len(reps) - 1, -1, -1):
            if all(torch.equal(v[i], v[reps[j]]) for v in obs.values()):
                index.append(j)
                break
        else:
            if len(reps) == max_distinct:
                return dict(obs), None
            reps.append(i)
            index.append(len(reps) - 1)
    if len(reps) == b:
        return dict(obs), None
    rows = torch.as_tensor(reps, device=obs["x"].device)
    return ({k: v[rows] for k, v in obs.items()},
            torch.as_tensor(index, dtype=torch.long, device=obs["x"].device))


class GDPRLModule(TorchRLModule, ValueFunctionAPI):
    """GDP's policy and value over padded placement observations.

    Spaces: :func:`envs.observation.placement_spaces`. ``model_config`` keys:
    the fields of :class:`~policies.gdp.policy.GDPConfig`.

    Outputs: ``Columns.ACTION_DIST_INPUTS`` ``[B, N_max * (D + 1)]`` (per-node
    logits, then each node's own index as its group, ``-1`` for padding; see
    :mod:`policies.distributions`); ``forward_train`` adds
    ``Columns.EMBEDDINGS`` ``[B, H]`` graph embeddings, which
    :meth:`compute_values` reuses.

    Example::

        obs_space, act_space = placement_spaces(max_nodes=64, max_edges=128,
                                                num_features=16, num_devices=2)
        spec = RLModuleSpec(module_class=GDPRLModule, observation_space=obs_space,
                            action_space=act_space, model_config={"hidden_dim": 64})
    """

    @override(TorchRLModule)
    def setup(self) -> None:
        self._max_nodes, num_features, _, self._num_devices = read_placement_spaces(
            self.observation_space, self.action_space, type(self).__name__)
        GroupedPlacementDistribution.required_input_dim(self.action_space)  # checks equal nvec
        self.gdp_config = GDPConfig.from_model_config(self.model_config)
        h = self.gdp_config.hidden_dim
        self.net = GDPNet(num_features, self._num_devices, self.gdp_config)
        self.value_head = mlp(h, h, 1, 2)
        self.action_dist_cls = GroupedPlacementDistribution.for_devices(self._num_devices)

    @override(TorchRLModule)
    def _forward(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        dist_inputs, _ = self._run(batch)
        return {Columns.ACTION_DIST_INPUTS: dist_inputs}

    @override(TorchRLModule)
    def _forward_train(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        dist_inputs, embeddings = self._run(batch)
        return {Columns.ACTION_DIST_INPUTS: dist_inputs, Columns.EMBEDDINGS: embeddings}

    @override(ValueFunctionAPI)
    def compute_values(self, batch: Dict[str, Any], embeddings: Optional[Any] = None) -> Tensor:
        if embeddings is None:
            _, embeddings = self._run(batch)
        return self.value_head(embeddings).squeeze(-1)

    def soften_policy(self, factor: float) -> None:
        """Spreads the placement distribution again (:meth:`GDPNet.soften`); ``train
        --init-soften`` calls it on a pre-trained policy."""
        self.net.soften(factor)

    def _run(self, batch: Mapping[str, Any]) -> Tuple[Tensor, Tensor]:
        raw = batch[Columns.OBS]
        if not isinstance(raw, Mapping) or not set(OBS_KEYS) <= set(raw):
            raise ValueError("GDPRLModule needs the Dict observation (x, edge_index, node_mask, "
                             "edge_mask) as a dict of tensors; do not flatten it.")
        obs = {k: torch.as_tensor(raw[k]) for k in OBS_KEYS}
        obs, index = unique_observations(obs)
        g = unpad_graphs(obs["x"].float(), obs["edge_index"], obs["node_mask"], obs["edge_mask"])
        out = self.net(g.x, g.edge_index, g.batch, g.node_valid)
        own = torch.arange(self._max_nodes, device=g.x.device).expand_as(g.node_valid)
        groups = torch.where(g.node_valid, own, torch.full_like(own, PADDED_GROUP))
        dist_inputs = pack_dist_inputs(out.node_logits, groups)
        embeddings = out.graph_embedding
        if index is not None:
            dist_inputs, embeddings = dist_inputs[index], embeddings[index]
        return dist_inputs, embeddings
