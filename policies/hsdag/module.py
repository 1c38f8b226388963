"""HSDAG as an RLlib ``TorchRLModule`` (new API stack).

The network is :class:`policies.hsdag.policy.HSDAGNet`; this module reads the padded
placement observation (:mod:`envs.observation`), carries the node state
between the steps of an episode as RLlib module state, and packs the grouped
placement distribution's inputs (:mod:`policies.distributions`). See
:mod:`policies.hsdag.policy` for the method and the reasons behind its settings.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Dict, Mapping, NamedTuple, Optional, Tuple

import numpy as np
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis import ValueFunctionAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override
from torch import Tensor

from envs.observation import GraphBatch, pad_node_values, read_placement_spaces, unpad_graphs
from policies.distributions import (
    PADDED_GROUP,
    GroupedPlacementDistribution,
    pack_dist_inputs,
    unpack_dist_inputs,
)
from policies.hsdag.policy import HSDAGConfig, HSDAGNet
from policies.layers import mlp, unique_ids
from policies.hsdag.move_distribution import GroupedMoveDistribution, pack_move_inputs, split_move_inputs
from policies.hsdag.segment_moves import SegmentHead, SegmentMoveDistribution, pack_segment_inputs, split_segment_inputs

__all__ = ["HSDAGRLModule", "NODE_STATE", "GROUPING_PARTNER", "GROUPING_LOGP", "GATE_PARTNER"]

logger = logging.getLogger(__name__)

NODE_STATE = "node_state"
#: extra model output of a sampled grouping: each node's dominant-edge partner (local id)
GROUPING_PARTNER = "grouping_partner"
#: forward_train output: the log-probability of each step's sampled grouping, ``[B, T]``
GROUPING_LOGP = "grouping_logp"
#: extra model output of sampling (with ``reuse_sampled_grouping``): each node's gate edge's
#: other end (local id, -1: none / padding), so the learner scores only those edges
GATE_PARTNER = "gate_partner"


def _to_union(local: Tensor, first_node: Tensor) -> Tensor:
    """Per-graph node ids (``-1``: none) as ids in the union of the batch's graphs."""
    return torch.where(local >= 0, local + first_node, local)


def _to_local(union: Tensor, first_node: Tensor, node_valid: Tensor) -> Tensor:
    """Inverse of :func:`_to_union`, padded back to ``[graphs, N_max]`` with ``-1``."""
    return pad_node_values(torch.where(union >= 0, union - first_node, union), node_valid, -1)


class _StepOut(NamedTuple):
    dist_inputs: Tensor  # [B, N_max * (D + 1)]
    embedding: Tensor  # [B, H]
    next_state: Tensor  # [B, N_max, H]
    partner: Optional[Tensor] = None  # [B, N_max] local partner ids (-1: none / padding)
    grouping_logp: Optional[Tensor] = None  # [B]
    gate: Optional[Tensor] = None  # [B, N_max] local gate partner ids (-1: none / padding)


class HSDAGRLModule(TorchRLModule, ValueFunctionAPI):
    """HSDAG as an RLlib ``TorchRLModule`` (new API stack), usable by REINFORCE-style
    learners and by PPO (it implements ``ValueFunctionAPI``).

    Spaces: see :func:`placement_spaces`. ``model_config`` keys: the fields of
    :class:`HSDAGConfig`; RLlib's ``max_seq_len`` (default 20) sets how many
    steps the learner back-propagates through the node-state recurrence.

    Outputs of every forward pass:

    - ``Columns.ACTION_DIST_INPUTS``: ``[B, (T,) N_max * (D + 1)]`` per-node group
      logits then per-node group ids (layout in :mod:`policies.distributions`);
    - ``Columns.STATE_OUT``: ``{"node_state": [B, N_max, H]}`` when stateful;
    - ``Columns.EMBEDDINGS`` (``forward_train``): ``[B, (T,) H]`` graph embeddings,
      re-used by :meth:`compute_values`;
    - with ``sampled_grouping``: ``"grouping_partner"`` (sampling, ``[B, N_max]``,
      kept with the episode) and ``"grouping_logp"`` (``forward_train``,
      ``[B, T]``: the sampled grouping's log-probability, which a learner adds
      to the placement's);
    - with ``reuse_sampled_grouping`` (the default), sampling also gives
      ``"gate_partner"`` (``[B, N_max]``, kept with the episode): each node's
      gate edge (the dominant edge whose score gates its pooled state), so
      ``forward_train`` scores only those edges, not all ``E`` to find them again.

    Observations may come with a time axis (``x`` of rank 4, as RLlib sends them
    to stateful modules) or without one (rank 3); ``Columns.STATE_IN`` may be
    left out for zeros (the start of an episode).

    Example::

        obs_space, act_space = placement_spaces(max_nodes=64, max_edges=128,
                                                num_features=16, num_devices=2)
        spec = RLModuleSpec(module_class=HSDAGRLModule, observation_space=obs_space,
                            action_space=act_space, model_config={"hidden_dim": 64})
    """

    @override(TorchRLModule)
    def setup(self) -> None:
        self._max_nodes, num_features, self._max_edges, self._num_devices = read_placement_spaces(
            self.observation_space, self.action_space, type(self).__name__
        )
        GroupedPlacementDistribution.required_input_dim(self.action_space)  # checks equal nvec
        self.hsdag_config = HSDAGConfig.from_model_config(self.model_config)
        h = self.hsdag_config.hidden_dim
        self.net = HSDAGNet(num_features, self._num_devices, self.hsdag_config)
        self.value_head = mlp(h, h, 1, 2)
        # segment moves (policies/hsdag/segment_moves.py) come on top of node moves
        mc = self.model_config
        mc = dataclasses.asdict(mc) if dataclasses.is_dataclass(mc) else dict(mc or {})
        self._segments = bool(self.hsdag_config.node_moves and mc.get("segment_moves"))
        self.segment_head = SegmentHead(h) if self._segments else None
        dist = GroupedMoveDistribution if self.hsdag_config.node_moves else GroupedPlacementDistribution
        dist = SegmentMoveDistribution if self._segments else dist
        self.action_dist_cls = dist.for_devices(self._num_devices)
        self._warned_regroup = False

    @override(TorchRLModule)
    def get_initial_state(self) -> Dict[str, np.ndarray]:
        if not self.hsdag_config.node_state_update:
            return {}
        return {NODE_STATE: np.zeros((self._max_nodes, self.hsdag_config.hidden_dim), np.float32)}

    @override(TorchRLModule)
    def _forward(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        return self._act(batch, grouping_noise=0.0)

    @override(TorchRLModule)
    def _forward_exploration(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        # Sampling: the grouping is parsed with exploration noise (HSDAGConfig.grouping_noise).
        return self._act(batch, grouping_noise=self.hsdag_config.grouping_noise)

    def _act(self, batch: Dict[str, Any], grouping_noise: float) -> Dict[str, Any]:
        """Distribution inputs (and the next node state) for choosing actions."""
        dist_inputs, _, state_out, extra = self._run(batch, reuse_grouping=False,
                                                     grouping_noise=grouping_noise)
        out = {Columns.ACTION_DIST_INPUTS: dist_inputs}
        for key in (GROUPING_PARTNER, GATE_PARTNER):
            if key in extra:
                out[key] = extra[key]
        if state_out is not None:
            out[Columns.STATE_OUT] = state_out
        return out

    @override(TorchRLModule)
    def _forward_train(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        dist_inputs, embeddings, state_out, extra = self._run(
            batch, reuse_grouping=self.hsdag_config.reuse_sampled_grouping
        )
        out = {Columns.ACTION_DIST_INPUTS: dist_inputs, Columns.EMBEDDINGS: embeddings}
        if GROUPING_LOGP in extra:
            out[GROUPING_LOGP] = extra[GROUPING_LOGP]
        if state_out is not None:
            out[Columns.STATE_OUT] = state_out
        return out

    @override(ValueFunctionAPI)
    def compute_values(self, batch: Dict[str, Any], embeddings: Optional[Any] = None) -> Tensor:
        if embeddings is None:
            _, embeddings, _, _ = self._run(batch, reuse_grouping=self.hsdag_config.reuse_sampled_grouping)
        return self.value_head(embeddings).squeeze(-1)

    def soften_policy(self, factor: float) -> None:
        """Spreads the placement distribution again (:meth:`HSDAGNet.soften`); a
        REINFORCE learner calls it when a run has stalled (``stall_shrink``)."""
        self.net.soften(factor)

    # -- internals -------------------------------------------------------------------
    def _run(
        self, batch: Mapping[str, Any], reuse_grouping: bool, grouping_noise: float = 0.0
    ) -> Tuple[Tensor, Tensor, Optional[Dict[str, Tensor]], Dict[str, Tensor]]:
        raw_obs = batch[Columns.OBS]
        if not isinstance(raw_obs, Mapping):
            raise ValueError(
                "HSDAGRLModule needs the Dict observation (x, edge_index, node_mask, "
                "edge_mask) as a dict of tensors; do not flatten it (no "
                "FlattenObservations connector)."
            )
        obs = {k: torch.as_tensor(v) for k, v in raw_obs.items()}
        has_time = obs["x"].dim() == 4
        if not has_time:
            obs = {k: v.unsqueeze(1) for k, v in obs.items()}
        num_graphs, steps = obs["x"].shape[:2]
        device = obs["x"].device

        state = None
        if self.is_stateful():
            state_in = batch.get(Columns.STATE_IN)
            if state_in is not None and NODE_STATE in state_in:
                state = torch.as_tensor(state_in[NODE_STATE], device=device).float()
            else:
                state = torch.zeros(num_graphs, self._max_nodes, self.hsdag_config.hidden_dim, device=device)

        stored = None
        if reuse_grouping and batch.get(Columns.ACTION_DIST_INPUTS) is not None:
            stored_inputs = torch.as_tensor(batch[Columns.ACTION_DIST_INPUTS], device=device)
            if not has_time:
                stored_inputs = stored_inputs.unsqueeze(1)
            if self._segments:
                stored_inputs, _ = split_segment_inputs(stored_inputs, self._num_devices)
            if self.hsdag_config.node_moves:
                stored_inputs, _ = split_move_inputs(stored_inputs, self._num_devices)
            _, stored = unpack_dist_inputs(stored_inputs, self._num_devices)
        partners = None
        if stored is not None and self.hsdag_config.sampled_grouping \
                and batch.get(GROUPING_PARTNER) is not None:
            partners = torch.as_tensor(batch[GROUPING_PARTNER], device=device)
            if not has_time:
                partners = partners.unsqueeze(1)
            grouping_noise = self.hsdag_config.grouping_noise  # the temperature of the draws
        gates = None  # each step's sampled gate edges: only those are scored again
        if stored is not None and partners is None and batch.get(GATE_PARTNER) is not None:
            gates = torch.as_tensor(batch[GATE_PARTNER], device=device)
            if not has_time:
                gates = gates.unsqueeze(1)

        # the structural embedding depends on the graph only: when every step of the
        # episodes sees the same graphs, compute it (and its backward) once, not per step
        shared, graphs = None, None
        if steps > 1 and all(torch.equal(v[:, t], v[:, 0]) for v in obs.values() for t in range(1, steps)):
            graphs = unpad_graphs(obs["x"][:, 0].float(), obs["edge_index"][:, 0], obs["node_mask"][:, 0],
                                  obs["edge_mask"][:, 0])
            shared = self.net.embed(graphs.x, graphs.edge_index, graphs.batch, graphs.num_graphs)

        dist_inputs, embeddings, drawn, logps, gated = [], [], [], [], []
        for t in range(steps):
            out = self._step(
                {k: v[:, t] for k, v in obs.items()},
                state,
                stored[:, t] if stored is not None else None,
                grouping_noise,
                shared,
                graphs,
                partners[:, t] if partners is not None else None,
                gates[:, t] if gates is not None else None,
            )
            dist_inputs.append(out.dist_inputs)
            embeddings.append(out.embedding)
            drawn.append(out.partner)
            logps.append(out.grouping_logp)
            gated.append(out.gate)
            if state is not None:
                state = out.next_state
        dist = torch.stack(dist_inputs, 1)
        emb = torch.stack(embeddings, 1)
        extra = {}
        if partners is not None and all(x is not None for x in logps):
            extra[GROUPING_LOGP] = torch.stack(logps, 1)
        elif partners is None and all(x is not None for x in drawn):
            extra[GROUPING_PARTNER] = torch.stack(drawn, 1).float()
        if stored is None and self.hsdag_config.reuse_sampled_grouping \
                and all(x is not None for x in gated):
            extra[GATE_PARTNER] = torch.stack(gated, 1).float()
        if not has_time:
            dist, emb = dist.squeeze(1), emb.squeeze(1)
            extra = {k: v.squeeze(1) for k, v in extra.items()}
        return dist, emb, ({NODE_STATE: state} if state is not None else None), extra

    def _step(self, obs: Mapping[str, Tensor], state: Optional[Tensor], stored: Optional[Tensor],
              grouping_noise: float = 0.0, embedding: Optional[Tensor] = None,
              graphs: Optional[GraphBatch] = None, partner: Optional[Tensor] = None,
              gate: Optional[Tensor] = None) -> _StepOut:
        """One step; ``embedding`` and ``graphs`` are the structural embedding and the
        unpadded ``obs`` when the caller already has them (the steps of an episode share them);
        ``partner``: the stored dominant-edge draws of a sampled grouping (local ids);
        ``gate``: the stored gate partners (local ids) of the stored grouping."""
        g = graphs if graphs is not None else unpad_graphs(
            obs["x"].float(), obs["edge_index"], obs["node_mask"], obs["edge_mask"])
        node_state = None
        if state is not None:
            node_state = state.reshape(-1, state.size(-1))
            if node_state.size(0) != g.x.size(0):  # padded slots: keep the real nodes
                node_state = node_state[g.node_valid.reshape(-1)]
        assignment = self._stored_assignment(stored, g) if stored is not None else None
        nodes_per_graph = torch.bincount(g.batch, minlength=g.num_graphs)
        first_node = (torch.cumsum(nodes_per_graph, 0) - nodes_per_graph)[g.batch]  # in the union
        union_partner = union_gate = None
        if partner is not None and assignment is not None:
            union_partner = _to_union(partner.long()[g.node_valid], first_node)
        elif gate is not None and assignment is not None:
            local = gate.long()[g.node_valid]
            if bool(((local >= -1) & (local < nodes_per_graph[g.batch])).all()):
                union_gate = _to_union(local, first_node)

        out = self.net(g.x, g.edge_index, node_state=node_state, batch=g.batch,
                       num_graphs=g.num_graphs, assignment=assignment, grouping_noise=grouping_noise,
                       embedding=embedding, partner=union_partner, gate_partner=union_gate)
        drawn, logp = None, None
        if out.grouping.partner_logp is not None:
            logp = torch.zeros(g.num_graphs, dtype=out.grouping.partner_logp.dtype,
                               device=g.x.device).index_add(0, g.batch, out.grouping.partner_logp)
            drawn = _to_local(out.grouping.partner, first_node, g.node_valid)
        gates = None
        if out.grouping.gate_partner is not None and assignment is None:
            gates = _to_local(out.grouping.gate_partner, first_node, g.node_valid)
        groups_per_graph = torch.bincount(out.grouping.group_batch, minlength=g.num_graphs)
        first_group = torch.cumsum(groups_per_graph, 0) - groups_per_graph
        local = out.grouping.assignment - first_group[g.batch]
        dist_inputs = pack_dist_inputs(
            pad_node_values(out.node_logits, g.node_valid, 0.0),
            pad_node_values(local, g.node_valid, PADDED_GROUP),
        )
        if out.move_logits is not None:
            dist_inputs = pack_move_inputs(dist_inputs, pad_node_values(out.move_logits, g.node_valid, 0.0))
        if self.segment_head is not None:
            starts = self.segment_head(out.node_embedding, g.batch, g.num_graphs)
            dist_inputs = pack_segment_inputs(dist_inputs, pad_node_values(starts, g.node_valid, 0.0))
        next_state = pad_node_values(out.next_node_state, g.node_valid, 0.0)
        return _StepOut(dist_inputs, out.graph_embedding, next_state, drawn, logp, gates)

    def _stored_assignment(self, stored: Tensor, g: GraphBatch) -> Optional[Tensor]:
        """The union assignment of the sampled grouping, or ``None`` if it does not
        fit these observations (then the grouping is parsed afresh)."""
        local = stored[g.node_valid]
        if local.numel() == 0:
            return None
        if bool((local < 0).any()) or bool((local >= self._max_nodes).any()):
            if not self._warned_regroup:
                logger.warning(
                    "The stored action-distribution inputs do not match the observed "
                    "graphs; re-grouping instead of re-using the sampled grouping."
                )
                self._warned_regroup = True
            return None
        _, union = unique_ids(g.batch * (self._max_nodes + 1) + local)
        return union
