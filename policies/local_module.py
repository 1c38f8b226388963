"""A learned method's RLModule trained by REINFORCE in one process, without Ray running.

``python -m hsdag_ray.train`` samples a method's module on EnvRunners and updates it with
its REINFORCE learner (:class:`policies.reinforce.REINFORCETorchLearner`, or the method's
own subclass). :class:`LocalModule` does the same steps in the calling process for a
stateless module that places every node at each step (it acts in
:class:`envs.placement_env.PlacementEnv`: the RNN placer, GDP with ``algo="reinforce"``):

* **Sampling** (:meth:`LocalModule.sample_episode`, without gradients): an episode is
  ``episode_len`` placements of one observation, each from the module's
  ``forward_exploration``: its own sampled actions when it returns them (the RNN placer
  decodes autoregressively), else a sample of its exploration distribution, as an
  EnvRunner's default connectors draw it.
* **Update** (:meth:`LocalModule.update`): the batch's placements are scored by
  ``forward_train`` with the actions and distribution inputs they were sampled with, as
  the learner's batch holds them; ``logp`` (plus a sampled grouping's ``grouping_logp``)
  and the entropy go to :class:`policies.reinforce_core.ReinforceCore` with the method's
  advantages (``advantages``: the method's own estimator, or the batch advantages of
  :func:`policies.advantages.advantages`), minimised by Adam at ``lr``.
* **Greedy placement** (:meth:`LocalModule.greedy`): ``forward_inference``'s placement.

The module class is the method's (:data:`policies.registry.METHODS`), so importing it
imports RLlib's module classes; Ray itself is never started. The caller seeds torch.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence

import numpy as np
import torch
from torch import Tensor

from policies.advantages import advantages as batch_advantages
from policies.reinforce_config import ReinforceConfig
from policies.reinforce_core import LocalLearner, ReinforceCore

__all__ = ["LocalModule", "ModuleEpisode"]

#: advantages of a batch: ``(rewards, mask) -> A`` (same shape, 0 where ``mask`` is 0)
Advantages = Callable[[Tensor, Tensor], Tensor]


class ModuleEpisode(NamedTuple):
    """One sampled episode.

    Attributes:
        obs: the padded observation every step saw (``envs.observation``'s keys).
        actions: ``[T, N_max]`` the device of every node, step by step.
        dist_inputs: ``[T, K]`` the distribution inputs each placement was drawn from.
    """

    obs: Mapping[str, Tensor]
    actions: Tensor
    dist_inputs: Tensor


class LocalModule(LocalLearner):
    """A stateless placement RLModule and its REINFORCE optimiser for one graph (module
    docstring).

    Args:
        module_class: the method's ``TorchRLModule`` class.
        num_features: node feature width ``F`` of the observations.
        num_devices: number of devices ``D``.
        edge_index: ``[2, E]`` the graph's directed edges (node indices).
        model_config: the module's ``model_config`` (the method's registry entry's).
        learn: REINFORCE's settings.
        advantages: the method's advantages (None: the batch advantages of
            ``learn.advantages``).
    """

    def __init__(self, module_class: type, num_features: int, num_devices: int, edge_index: Any,
                 model_config: Mapping[str, Any], learn: ReinforceConfig,
                 advantages: Optional[Advantages] = None) -> None:
        self.edge_index = np.asarray(edge_index, dtype=np.int64).reshape(2, -1)
        self._num_edges = max(self.edge_index.shape[1], 1)
        self._module_class, self._model_config = module_class, dict(model_config)
        self._num_features, self._num_devices = int(num_features), int(num_devices)
        self.learn = learn
        self._advantages = advantages or (lambda r, m: batch_advantages(r, m, learn.advantages))
        self.core = ReinforceCore(learn)
        #: the module, built at the first observation (its spaces are the graph's size)
        self.module: Any = None
        self.optimizer: Optional[torch.optim.Optimizer] = None
        #: updates made so far
        self.updates = 0

    def _built(self, num_nodes: int) -> Any:
        """The module and its optimiser, built for ``num_nodes`` nodes at the first call."""
        from envs.observation import placement_spaces

        if self.module is None:
            obs_space, act_space = placement_spaces(num_nodes, self._num_edges, self._num_features,
                                                    self._num_devices)
            self.module = self._module_class(observation_space=obs_space, action_space=act_space,
                                             model_config=self._model_config)
            if self.module.is_stateful():
                raise ValueError(f"{type(self.module).__name__} carries a state between steps; "
                                 "in-process runs train stateless modules only")
            self.optimizer = torch.optim.Adam(self.module.parameters(), lr=self.learn.lr)
        return self.module

    def _observation(self, x: Any) -> dict[str, Tensor]:
        from envs.observation import pad_graph_observation

        x = np.asarray(x, dtype=np.float32)
        obs = pad_graph_observation(x, self.edge_index, x.shape[0], self._num_edges)
        return {k: torch.as_tensor(v) for k, v in obs.items()}

    @torch.no_grad()
    def sample_episode(self, x: Any) -> ModuleEpisode:
        """``episode_len`` placements sampled from the policy for the node features ``x``."""
        from ray.rllib.core.columns import Columns

        obs = self._observation(x)
        module = self._built(obs["x"].shape[0])
        batch = {Columns.OBS: {k: v.unsqueeze(0) for k, v in obs.items()}}
        actions, inputs = [], []
        for _ in range(self.learn.episode_len):
            out = module.forward_exploration(batch)
            dist_inputs = out[Columns.ACTION_DIST_INPUTS]
            action = out.get(Columns.ACTIONS)
            if action is None:
                action = module.get_exploration_action_dist_cls().from_logits(dist_inputs).sample()
            actions.append(action[0].long())
            inputs.append(dist_inputs[0])
        return ModuleEpisode(obs, torch.stack(actions), torch.stack(inputs))

    def score(self, episodes: Sequence[ModuleEpisode]) -> tuple[Tensor, Tensor, dict[str, float]]:
        """``(logp [B, T], entropy [B, T])`` of the episodes' placements under the current
        weights, as the learner scores its batch (``forward_train``)."""
        from ray.rllib.core.columns import Columns

        steps = episodes[0].actions.size(0)
        obs = {k: torch.cat([ep.obs[k].unsqueeze(0).expand(steps, *ep.obs[k].shape)
                             for ep in episodes]) for k in episodes[0].obs}
        actions = torch.cat([ep.actions for ep in episodes])
        batch = {Columns.OBS: obs, Columns.ACTIONS: actions,
                 Columns.ACTION_DIST_INPUTS: torch.cat([ep.dist_inputs for ep in episodes])}
        out = self.module.forward_train(batch)
        dist = self.module.get_train_action_dist_cls().from_logits(out[Columns.ACTION_DIST_INPUTS])
        logp = dist.logp(actions)
        if out.get("grouping_logp") is not None:
            logp = logp + out["grouping_logp"].to(logp.dtype)
        return (logp.reshape(len(episodes), steps), dist.entropy().reshape(len(episodes), steps), {})

    def advantages(self, rewards: Tensor, mask: Tensor) -> Tensor:
        return self._advantages(rewards, mask)

    def soften(self, shrink: float) -> None:
        soften = getattr(self.module, "soften_policy", None)
        if soften is not None:
            soften(shrink)


    @torch.no_grad()
    def greedy(self, x: Any) -> np.ndarray:
        """``[N]`` the module's greedy placement (``forward_inference``) for the features ``x``."""
        from ray.rllib.core.columns import Columns

        obs = self._observation(x)
        module = self._built(obs["x"].shape[0])
        out = module.forward_inference({Columns.OBS: {k: v.unsqueeze(0) for k, v in obs.items()}})
        action = out.get(Columns.ACTIONS)
        if action is None:
            action = module.get_inference_action_dist_cls().from_logits(
                out[Columns.ACTION_DIST_INPUTS]).to_deterministic().sample()
        return action[0].long().numpy()
