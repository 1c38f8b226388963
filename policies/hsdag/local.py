"""HSDAG trained by REINFORCE in one process, without Ray or RLlib.

The method is the one ``python -m hsdag_ray.train --method hsdag`` trains through RLlib
(:class:`policies.hsdag.module.HSDAGRLModule` sampled by EnvRunners, updated by
:class:`policies.reinforce.REINFORCETorchLearner`), on the same network
(:class:`policies.hsdag.policy.HSDAGNet`) with the same settings and defaults
(:func:`configs_from_settings` reads a run's settings through the method's entry in
:mod:`policies.registry`, as :func:`hsdag_ray.run.algos.algo_config` does):

* **Sampling** (:meth:`LocalHSDAG.sample_episode`, without gradients): an episode is
  ``episode_len`` placements of one observation. Each step parses a grouping with Gumbel
  noise of scale ``grouping_noise`` on the edge scores (with ``sampled_grouping``, each
  node draws its dominant edge instead), draws one device per group
  (:class:`policies.grouped_placement.GroupedPlacement`) and carries the node state
  (each node's group embedding) to the next step; the state starts at zeros.
* **Update** (:meth:`LocalHSDAG.update`): the batch's episodes run again with gradients,
  each step under the grouping it was sampled with and each node's gate edge (or, with
  ``sampled_grouping``, the dominant-edge draws, whose log-probability joins the
  placement's), so ``logp`` is the sampler's; gradients flow through the node-state
  recurrence of the whole episode, the structural embedding is computed once per
  episode, and the loss is REINFORCE's
  ``-mean_t[logp_t * A_t] - w * mean_t[H_t]`` with the batch advantages of
  :func:`policies.advantages.advantages`, minimised by Adam at ``lr`` (``num_epochs``
  passes). The loss, the stall response (``stall_patience``) and the replay memory
  (``replay_episodes``) are :class:`policies.reinforce_core.ReinforceCore`'s, which the
  RLlib learner calls too; the settings are one
  :class:`policies.reinforce_config.ReinforceConfig`.
* **Greedy placement** (:meth:`LocalHSDAG.greedy`): the grouping parsed without noise at
  an episode's first step, and each group's most likely device.

Given the same weights and torch seed, an episode's placements are those the RLlib
module samples step by step, and an update's ``logp`` and entropy are those of its
learner's pass (tests/test_inprocess.py checks both). A run's observation is one graph,
unpadded (the RLlib path pads it to the graph's own size, which changes nothing), and
the update runs on the CPU (the RLlib learner takes a GPU when there is one). Node and
segment moves (``node_moves``,
``segment_moves``) use RLlib action distributions and are trained by ``python -m
hsdag_ray.train`` only. The caller seeds torch (sampling, the Gumbel noise and the
initial weights draw from torch's global generator).
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional, Sequence

import numpy as np
import torch
from torch import Tensor

from policies.advantages import advantages
from policies.grouped_placement import GroupedPlacement
from policies.hsdag.config import HSDAGConfig
from policies.hsdag.policy import HSDAGNet, HSDAGOutput
from policies.reinforce_config import ReinforceConfig
from policies.reinforce_core import LocalLearner, ReinforceCore

__all__ = ["Episode", "LocalHSDAG", "configs_from_settings"]


def configs_from_settings(cfg: Any) -> tuple[HSDAGConfig, ReinforceConfig]:
    """The network's and REINFORCE's settings of a run from its settings (a
    :class:`hsdag_ray.run.config.TrainConfig` as :func:`hsdag_ray.run.resolve.resolved` writes it
    out), read as the RLlib path reads them (the network's through the method's
    ``model_config``, REINFORCE's through :func:`policies.registry.reinforce_config`)."""
    from policies.registry import get, reinforce_config

    method = get("hsdag")
    model_config = method.model_config(cfg)
    if model_config.get("node_moves") or model_config.get("segment_moves"):
        raise ValueError("HSDAG's node and segment moves sample from RLlib action distributions; "
                         "train them with python -m hsdag_ray.train --node-moves")
    learn, _ = reinforce_config(method, cfg)
    return HSDAGConfig.from_model_config(model_config), learn


class Episode(NamedTuple):
    """One sampled episode: what an update needs to score its placements again.

    Attributes:
        x: ``[N, F]`` the observation every step saw.
        actions: ``[T, N]`` the device of every node, step by step.
        assignment: ``[T, N]`` the sampled grouping of every step.
        gate: ``[T, N]`` each node's gate partner (the other end of its noiseless
            dominant edge, whose score gates its pooled state; -1: none).
        partner: ``[T, N]`` with ``sampled_grouping``, each node's drawn dominant-edge
            partner (-1: none), else None.
    """

    x: Tensor
    actions: Tensor
    assignment: Tensor
    gate: Tensor
    partner: Optional[Tensor]


class LocalHSDAG(LocalLearner):
    """The HSDAG network and its REINFORCE optimiser for one graph (module docstring).

    Args:
        num_features: node feature width ``F`` of the observations.
        num_devices: number of devices ``D``.
        edge_index: ``[2, E]`` the graph's directed edges (node indices).
        config: the network's settings.
        learn: REINFORCE's settings.
    """

    def __init__(self, num_features: int, num_devices: int, edge_index: Any, config: HSDAGConfig,
                 learn: ReinforceConfig) -> None:
        self.config, self.learn = config, learn
        self.net = HSDAGNet(num_features, num_devices, config)
        self.edge_index = torch.as_tensor(np.asarray(edge_index), dtype=torch.long).reshape(2, -1)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=learn.lr)
        #: the update shared with the RLlib learner (:mod:`policies.reinforce_core`)
        self.core = ReinforceCore(learn)
        #: updates made so far
        self.updates = 0

    # -- network steps ---------------------------------------------------------------
    def _initial_state(self, num_nodes: int) -> Optional[Tensor]:
        """The node state of an episode's first step (zeros; None when stateless)."""
        if not self.config.node_state_update:
            return None
        return torch.zeros(num_nodes, self.config.hidden_dim)

    def _step(self, x: Tensor, state: Optional[Tensor], embedding: Optional[Tensor] = None,
              **grouping: Any) -> HSDAGOutput:
        batch = torch.zeros(x.size(0), dtype=torch.long)
        return self.net(x, self.edge_index, node_state=state, batch=batch, num_graphs=1,
                        embedding=embedding, **grouping)

    @torch.no_grad()
    def sample_episode(self, x: Any) -> Episode:
        """``episode_len`` placements sampled from the policy for the observation ``x``
        (``[N, F]``), the grouping of each step parsed with the sampling noise."""
        x = torch.as_tensor(np.asarray(x), dtype=torch.float32)
        state = self._initial_state(x.size(0))
        steps = []
        for _ in range(self.learn.episode_len):
            out = self._step(x, state, grouping_noise=self.config.grouping_noise)
            g = out.grouping
            steps.append((GroupedPlacement(out.node_logits, g.assignment).sample(), g.assignment,
                          g.gate_partner, g.partner))
            if state is not None:
                state = out.next_node_state
        actions, assignment, gate, partner = zip(*steps)
        drawn = torch.stack(partner) if partner[0] is not None else None
        return Episode(x, torch.stack(actions), torch.stack(assignment), torch.stack(gate), drawn)

    def _score(self, episode: Episode) -> tuple[Tensor, Tensor, Tensor]:
        """``(logp [T], entropy [T], groups [T])`` of an episode's placements under the
        current weights, each step under the grouping it was sampled with (as the RLlib
        learner's ``forward_train``; re-parsed without noise when
        ``reuse_sampled_grouping`` is off)."""
        x = episode.x
        embedding = self.net.embed(x, self.edge_index, torch.zeros(x.size(0), dtype=torch.long), 1)
        state = self._initial_state(x.size(0))
        logps, entropies, groups = [], [], []
        for t in range(episode.actions.size(0)):
            if not self.config.reuse_sampled_grouping:
                grouping: dict[str, Any] = {}
            elif episode.partner is not None:
                grouping = {"assignment": episode.assignment[t], "partner": episode.partner[t],
                            "grouping_noise": self.config.grouping_noise}
            else:
                grouping = {"assignment": episode.assignment[t], "gate_partner": episode.gate[t]}
            out = self._step(x, state, embedding, **grouping)
            dist = GroupedPlacement(out.node_logits, out.grouping.assignment)
            logp = dist.logp(episode.actions[t])
            if out.grouping.partner_logp is not None:  # the sampled grouping's own
                logp = logp + out.grouping.partner_logp.sum()
            logps.append(logp)
            entropies.append(dist.entropy())
            groups.append(dist.num_groups)
            if state is not None:
                state = out.next_node_state
        return torch.stack(logps), torch.stack(entropies), torch.stack(groups)

    # -- learning (LocalLearner's update and iterate) ---------------------------------
    def score(self, episodes: Sequence[Episode]) -> tuple[Tensor, Tensor, dict[str, float]]:
        logp, entropy, groups = (torch.stack(v) for v in zip(*(self._score(ep) for ep in episodes)))
        return logp, entropy, {"num_groups": float(groups.float().mean())}

    def advantages(self, rewards: Tensor, mask: Tensor) -> Tensor:
        return advantages(rewards, mask, self.learn.advantages)

    def soften(self, shrink: float) -> None:
        self.net.soften(shrink)

    @torch.no_grad()
    def greedy(self, x: Any) -> np.ndarray:
        """``[N]`` the greedy placement of the observation ``x``: the grouping parsed without
        noise at an episode's first step, and each group's most likely device."""
        x = torch.as_tensor(np.asarray(x), dtype=torch.float32)
        out = self._step(x, self._initial_state(x.size(0)))
        return GroupedPlacement(out.node_logits, out.grouping.assignment).greedy().numpy()
