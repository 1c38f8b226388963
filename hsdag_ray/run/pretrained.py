"""Pre-trained policies: their checkpoint file, loading one, placing with one.

A pre-training run (``python -m hsdag_ray.pretrain``) writes ``pretrained.pt``:
the RLModule's state dict and what it takes to rebuild and check it (the
method, its ``model_config``, the feature and device names it observed, the
family and graphs it learned on), with ``pretrained.json`` beside it for
people. ``train --init`` loads it into the RLModule before training
(:func:`load_into_algo`) and refuses, in one sentence, a checkpoint of
another method or network shape; ``train --budget 0 --init`` places
zero-shot (:class:`ZeroShotDriver`): the greedy placement of the policy, and
with ``--zero-shot-samples N`` N-1 sampled ones besides, each measured once
through the run's store like any placement. A fine-tuning run (``--init`` with
a budget) measures the greedy placement first (:func:`first_placement`), then
the run's start (the fastest single device, fitted), so its best is never
worse than zero-shot's nor than the best single device's. Neither ever
measures a placement that breaks a device's memory when a feasible one is
found by the rule of :mod:`hsdag_core.fit` (:func:`infer_placements`).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, Optional

import numpy as np

from hsdag_ray.cli import UsageError

__all__ = ["CHECKPOINT_FILE", "save_pretrained", "read_pretrained", "check_compatible", "adopt_settings",
           "init_soften_factor", "load_into_algo", "check_method", "build_module", "infer_placements",
           "first_placement", "ZeroShotDriver"]

CHECKPOINT_FILE = "pretrained.pt"
FORMAT = 1


def save_pretrained(folder: Path, module, meta: Mapping[str, Any]) -> Path:
    """Write ``folder/pretrained.pt`` (state dict + ``meta``) and ``pretrained.json`` (``meta``)."""
    import torch

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
    path = folder / CHECKPOINT_FILE
    # whole or absent whenever the process dies: written aside, synced, renamed into place
    # (a half-written pretrained.pt would fail fine-tuning runs long after)
    tmp = folder / f".{CHECKPOINT_FILE}.tmp"
    with tmp.open("wb") as f:
        torch.save({"format": FORMAT, **meta, "state_dict": state}, f)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
    tmp = folder / ".pretrained.json.tmp"
    tmp.write_text(json.dumps(dict(meta), indent=1, default=str))
    tmp.replace(folder / "pretrained.json")
    return path


def read_pretrained(path: str | Path) -> dict[str, Any]:
    """The checkpoint at ``path`` (the file or the folder holding it)."""
    import torch

    p = Path(path)
    if p.is_dir():
        p = p / CHECKPOINT_FILE
    if not p.is_file():
        raise UsageError(f"{path} is not a pre-trained checkpoint (no {CHECKPOINT_FILE}); pass the "
                         "folder python -m hsdag_ray.pretrain printed")
    try:
        ckpt = torch.load(p, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - any unreadable file gets the same sentence
        raise UsageError(f"{p} cannot be read as a pre-trained checkpoint ({type(e).__name__})") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT or "state_dict" not in ckpt:
        raise UsageError(f"{p} is not a checkpoint written by python -m hsdag_ray.pretrain")
    return ckpt


def check_method(ckpt: Mapping[str, Any], method: str) -> None:
    """Refuse (one sentence) a checkpoint of another method."""
    if ckpt.get("method") != method:
        raise UsageError(f"the checkpoint holds a {ckpt.get('method')} policy but the run's method is "
                         f"{method}; pass --method {ckpt.get('method')} or another checkpoint")


def adopt_settings(cfg, ckpt: Mapping[str, Any]):
    """``cfg`` with the checkpoint's network, feature and reward settings wherever the
    run left them at their defaults (a setting the run names itself is kept, and a
    mismatch is then refused by :func:`check_compatible`): ``train --init`` needs no
    copy of the pre-training's flags."""
    from hsdag_ray.run.config import TrainConfig, expand

    defaults = TrainConfig()
    # a checkpoint that does not name the incumbent settings was trained without them;
    # settings named flat or as section.name (expand reads both)
    theirs = {"hsdag.incumbent_prior": 0.0, "env.incumbent": False,
              **dict(ckpt.get("settings") or {}), "learning.reward": ckpt.get("reward", "")}
    change = {}
    for key, value in theirs.items():
        for section, name, v in expand(key, value, "the checkpoint"):
            own, default = getattr(getattr(cfg, section), name), getattr(getattr(defaults, section), name)
            if v not in (None, "") and own == default and own != v:
                change[f"{section}.{name}"] = v
    return cfg.replace(**change) if change else cfg


def check_compatible(ckpt: Mapping[str, Any], method: str, module) -> None:
    """Refuse (one sentence) a checkpoint of another method or whose tensors differ in shape."""
    check_method(ckpt, method)
    own = module.state_dict()
    theirs = ckpt["state_dict"]
    missing = sorted(set(own) ^ set(theirs))
    if missing:
        raise UsageError(f"the checkpoint's {method} network differs from the run's (parameter "
                         f"{missing[0]} is in only one of them); use the network settings it was "
                         f"trained with: {ckpt.get('settings', {})}")
    for k, v in own.items():
        if tuple(v.shape) != tuple(theirs[k].shape):
            raise UsageError(f"the checkpoint's {method} network has {k} of shape "
                             f"{tuple(theirs[k].shape)}, the run's {tuple(v.shape)}: the features, "
                             "devices or network settings differ; use the ones it was trained with: "
                             f"{ckpt.get('settings', {})}")


def init_soften_factor(cfg, method) -> float:
    """The factor a fine-tuning run spreads its loaded policy by: ``--init-soften``, or
    when left at 0 the method's own (``Method.init_soften``); 1 leaves it as loaded.
    Raises :class:`UsageError` for a factor below 1 on a policy with no ``soften_policy``."""
    factor = cfg.run.init_soften or method.init_soften
    if factor < 1.0:
        from policies.registry import load

        if not hasattr(load(method.module), "soften_policy"):
            raise UsageError(f"--init-soften spreads a policy through its soften_policy, which the "
                             f"{method.name} policy does not have (HSDAG's and GDP's do); leave it at 1")
    return factor


def load_into_algo(algo, ckpt: Mapping[str, Any], method: str, soften: float = 1.0) -> None:
    """Load the checkpoint's weights into the learner's RLModule and every EnvRunner's;
    ``soften`` below 1 then spreads the loaded policy (the module's ``soften_policy``,
    checked and chosen by :func:`init_soften_factor`) before any EnvRunner samples with it."""
    from ray.rllib.core import DEFAULT_MODULE_ID

    state = ckpt["state_dict"]

    def load(learner):
        module = learner.module[DEFAULT_MODULE_ID]
        check_compatible(ckpt, method, module)
        module.load_state_dict(state)
        if soften < 1.0:
            module.soften_policy(soften)
        return True

    algo.learner_group.foreach_learner(load)
    algo.env_runner_group.sync_weights(from_worker_or_learner_group=algo.learner_group,
                                       inference_only=True)


def build_module(ckpt: Mapping[str, Any], method, env):
    """The checkpoint's RLModule for ``env``'s spaces, weights loaded (for inference)."""
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from policies.registry import load

    module = RLModuleSpec(module_class=load(method.module), observation_space=env.observation_space,
                          action_space=env.action_space,
                          model_config=dict(ckpt.get("model_config") or {})).build()
    check_compatible(ckpt, method.name, module)
    module.load_state_dict(ckpt["state_dict"])
    module.eval()
    return module


def _act(module, obs: Mapping[str, np.ndarray], greedy: bool):
    import torch
    from ray.rllib.core.columns import Columns

    batch = {Columns.OBS: {k: torch.as_tensor(np.asarray(v))[None] for k, v in obs.items()}}
    with torch.no_grad():
        out = module.forward_inference(batch) if greedy else module.forward_exploration(batch)
        dist = module.action_dist_cls.from_logits(out[Columns.ACTION_DIST_INPUTS])
        if greedy:
            dist = dist.to_deterministic()
        return np.asarray(dist.sample()[0].cpu().numpy())


#: sampled placements drawn per placement asked for, at most, before infeasible ones are repaired
DRAWS = 10


def _policy_placement(module, env, greedy: bool, seed: int) -> np.ndarray:
    """One placement of the policy, nothing measured (see :func:`infer_placements`)."""
    n = env.graph.num_nodes
    obs, _ = env.reset(seed=seed)
    if not hasattr(env, "current_node"):  # all nodes at once
        return np.asarray(_act(module, obs, greedy)).reshape(-1)[:n].astype(np.int64)
    for _ in range(env.steps_per_episode):  # one node per step
        obs = env.place_unmeasured(int(np.asarray(_act(module, obs, greedy)).reshape(-1)[0]))
    return env.placement.copy()


def infer_placements(module, env, count: int, seed: int = 0, fit: bool = True) -> list[np.ndarray]:
    """``count`` placements of ``env``'s graph by the policy, nothing measured: the
    greedy one first, then sampled ones. A policy that places all nodes at once
    (HSDAG, GDP, the RNN placer) acts on the first observation of an episode; a
    policy that places one node per step (Placeto) walks an episode, the environment's
    placement updated without measuring (start times come from the simulator's
    schedule).

    With ``fit`` (and a profile of the run's devices, the environment's ``limits``) no
    placement breaks a device's limits when the rule of :mod:`hsdag_core.fit`
    finds one that does not: an infeasible greedy placement is repaired (the
    cheapest set of nodes moves off the overflowing device); sampled
    placements that do not fit are drawn again, up to ``DRAWS`` draws per
    placement asked for and until ``DRAWS`` draws in a row did not fit (a
    policy that seldom fits is not sampled on and on: a per-node policy's draw
    walks a whole episode), and the ones still missing are repaired samples.
    """
    import torch

    from hsdag_core.fit import feasible, repair

    torch.manual_seed(seed)
    limits = env.limits if fit else None

    def fitted(p: np.ndarray) -> np.ndarray:
        fixed = repair(limits, p)
        return p if fixed is None else fixed

    greedy = _policy_placement(module, env, True, seed)
    out = [greedy if limits is None else fitted(greedy)]
    want = count - 1
    if limits is None:
        return out + [_policy_placement(module, env, False, seed + k) for k in range(1, count)]
    kept, rejected, misses = [], [], 0
    for k in range(1, DRAWS * want + 1):
        if len(kept) == want or misses == DRAWS:
            break
        p = _policy_placement(module, env, False, seed + k)
        fits = feasible(limits, p)
        (kept if fits else rejected).append(p)
        misses = 0 if fits else misses + 1
    missing = want - len(kept)
    return out + kept + [fitted(p) for p in rejected[:missing]]


def first_placement(ckpt, method, env_cfg: dict, real: bool, seed: int = 0) -> np.ndarray:
    """The pre-trained policy's greedy placement of the run's graph, made to fit
    (:func:`infer_placements`): what a fine-tuning run measures first."""
    from policies.registry import load

    own = {**env_cfg, "store": "", "measure_reference": not real}
    env = load(method.env)(own)
    module = build_module(ckpt, method, env)
    return infer_placements(module, env, 1, seed=seed)[0]


class ZeroShotDriver:
    """``train --budget 0``: one iteration that places with the pre-trained policy
    and measures its placements (the greedy one, plus ``zero_shot_samples - 1``
    sampled) through the run's store; nothing is learned. With a real backend
    the measuring actor asks for ``resources`` (a measuring slot and, on a
    cluster naming device sets, the run's ``devices_<A+B>``), as the training
    drivers' do."""

    #: whether the method has nothing more to propose (the run then stops)
    done = False

    def __init__(self, run, env) -> None:
        """``run``: the :class:`hsdag_ray.run.resolved_run.ResolvedRun` (its checkpoint read once)."""
        from envs.measuring_service import measuring_service
        from hsdag_ray.run.config import MEASURE_RESOURCE
        from policies.registry import load

        cfg, method, env_cfg, real, resources = run.cfg, run.method, run.env_config, run.real, run.resources
        if not cfg.run.init:
            raise UsageError("--budget 0 places with a pre-trained policy: pass --init CHECKPOINT")
        if method.approach != "rl":
            raise UsageError(f"--budget 0 places with a pre-trained policy; {method.name} learns none")
        self.cfg, self.done = cfg, False
        self.ckpt = run.ckpt
        # the policy's own copy: measures nothing of the run (the simulator's references
        # give Placeto's start times; a real backend measures only through the service)
        own = {**env_cfg, "store": "", "measure_reference": not real}
        self.env = load(method.env)(own)
        self.module = build_module(self.ckpt, method, self.env)
        # pinned like the training drivers' measuring actors: a measuring slot on a
        # machine with the run's devices (hsdag_ray.run.nodes.measuring_resources)
        self.service = measuring_service(env_cfg, real, resources or {MEASURE_RESOURCE: 1},
                                         tracked=True)

    @property
    def handle(self):
        return self.module

    def iterate(self) -> dict[str, Optional[float]]:
        from envs.measuring_service import call

        if self.done:
            return {}
        placements = infer_placements(self.module, self.env, max(1, self.cfg.run.zero_shot_samples),
                                      seed=self.cfg.run.seed)
        call(self.service, "measure_batch", [p.tolist() for p in placements])
        self.done = True
        return {}

    def save(self, folder: Path) -> None:
        import shutil

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        src = Path(self.cfg.run.init)
        shutil.copyfile(src / CHECKPOINT_FILE if src.is_dir() else src, folder / CHECKPOINT_FILE)

    def restore(self, folder: Path) -> None:
        self.done = True

    def stop(self) -> None:
        from envs.measuring_service import release

        release(self.service)
