"""Pre-training one policy on a family of graphs, what ``python -m hsdag_ray.pretrain`` runs.

:func:`pretrain` trains the policy with RLlib on the family's training graphs
(:func:`family_graph_configs`: each graph with its profile, a graph drawn per episode),
after ``imitate_steps`` steps of imitating each graph's exact optimum, and writes the
folder ``train --init`` reads; :func:`default_budget` and :data:`PRETRAIN_DEFAULTS` are
where pre-training's defaults differ from a training run's.
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, Optional

from envs.backends import SIMULATOR
from hsdag_ray.cli import UsageError
from hsdag_ray.run.config import SECTIONS, TrainConfig, settings_of
from hsdag_core.families import ACCELERATOR

__all__ = ["pretrain", "family_graph_configs", "graph_configs", "profile_file", "file_slug",
           "default_budget", "PRETRAIN_DEFAULTS", "DEFAULT_BUDGET", "SCALE_FREE_REWARD"]

#: pre-training budget when none is given (placements over all graphs), unless the method has
#: its own after imitation (``Method.budget_after_imitation``)
DEFAULT_BUDGET = 2000
#: the reward of pre-training when none is given: the best single device's latency over
#: the placement's, the same scale on every graph
SCALE_FREE_REWARD = "speedup"


def file_slug(text: str) -> str:
    """``text`` (a model spec, a run's name) as a file name: every character but
    letters, digits and ``_.=-`` as ``_``."""
    return re.sub(r"[^A-Za-z0-9_.=-]", "_", text)


def profile_file(folder: Path, spec: str) -> Path:
    """Where a family graph's profile is written in a pre-training folder."""
    return Path(folder) / "profiles" / (file_slug(spec) + ".json")


def family_graph_configs(cfg: TrainConfig, family: str, split: str, folder: Optional[Path],
                         say=lambda s: None, accelerator: str = ACCELERATOR) -> list[dict[str, Any]]:
    """One environment config per graph of ``family``'s ``split``, each with its own
    profile from device specs, ``CPU_MODEL`` and ``accelerator`` (written under
    ``folder/profiles`` when ``folder`` is set)."""
    from hsdag_core.families import get_family

    return graph_configs(cfg, get_family(family).graphs(split), folder, say, accelerator)


def graph_configs(cfg: TrainConfig, graphs, folder: Optional[Path], say=lambda s: None,
                  accelerator: str = ACCELERATOR) -> list[dict[str, Any]]:
    """:func:`family_graph_configs` for the given graphs (:class:`FamilyGraph` s)."""
    from hsdag_core.coarsening import build_graph
    from hsdag_core.families import family_devices, family_profile
    from hsdag_ray.run.resolve import env_config

    out = []
    for g in graphs:
        t0 = time.time()
        _, _, graph, _ = build_graph(g.spec, cfg.env.coarsen)
        prof = family_profile(graph, accelerator=accelerator)
        if folder is not None:
            path = profile_file(folder, g.spec)
            path.parent.mkdir(parents=True, exist_ok=True)
            prof.save(path)
        c = cfg.replace(model=g.spec)
        out.append(env_config(c, SIMULATOR, family_devices(accelerator), prof.to_json(), store=""))
        say(f"  {g.spec} ({g.group}): {graph.num_nodes} nodes ({time.time() - t0:.1f} s)")
    return out


def _local_env(algo):
    """The driver-side EnvRunner's environment (the run samples there), or None."""
    try:
        env = algo.env_runner.env
        while not hasattr(env, "envs") and hasattr(env, "env"):  # vector-env wrappers
            env = env.env
        return env.envs[0].unwrapped
    except Exception:  # noqa: BLE001 - only a report is lost
        return None


def pretrain(cfg: TrainConfig, family: str, out_dir: Path, say=print,
             imitate_steps: int = 0, accelerator: str = ACCELERATOR) -> dict[str, Any]:
    """Pre-train ``cfg.run.method`` on ``family``'s training graphs; return the run's summary.
    ``imitate_steps`` > 0: first that many steps of imitating each training graph's exact
    optimum (:mod:`policies.imitate`), then ``cfg.run.budget`` placements of reinforcement.
    Every graph is placed on ``CPU_MODEL`` and ``accelerator``
    (:data:`hsdag_core.families.FAMILY_ACCELERATORS`)."""
    import ray
    import torch
    from ray.rllib.core import DEFAULT_MODULE_ID

    from envs.multi_graph import MultiGraphEnv, padding_of
    from hsdag_ray.run.algos import algo_config
    from hsdag_core.families import family_devices, get_family
    from hsdag_ray.run.local_ray import start_or_join
    from hsdag_ray.run.pretrained import save_pretrained
    from policies.registry import get

    method = get(cfg.run.method)
    if method.approach != "rl":
        raise UsageError(f"{cfg.run.method} is a {method.approach} method and learns no policy; pre-train "
                         "a learned one (hsdag, placeto)")
    fam = get_family(family)
    devices = family_devices(accelerator)
    if not cfg.learning.reward:
        # latencies of a family's graphs differ by orders of magnitude: a reward relative to
        # each graph's best single device keeps them comparable (a value baseline, PPO's)
        cfg = cfg.replace(reward=SCALE_FREE_REWARD)
    torch.set_num_threads(cfg.run.torch_threads)
    out_dir.mkdir(parents=True, exist_ok=True)
    say(f"family {family}: {len(fam.train)} training graphs, {len(fam.held_out)} held out")
    train_cfgs = family_graph_configs(cfg, family, "train", out_dir, say, accelerator)
    held_cfgs = family_graph_configs(cfg, family, "held_out", out_dir, say, accelerator)
    n, e = padding_of(train_cfgs)
    train_cfgs = [{**c, "max_nodes": n, "max_edges": e} for c in train_cfgs]
    (out_dir / "graphs.json").write_text(json.dumps({
        "family": family, "devices": devices,
        "train": [{"spec": g.spec, "group": g.group, "profile": str(profile_file(out_dir, g.spec))}
                  for g in fam.train],
        "held_out": [{"spec": g.spec, "group": g.group, "profile": str(profile_file(out_dir, g.spec))}
                     for g in fam.held_out]}, indent=1))
    del held_cfgs  # their profiles are written; nothing of them is seen in training
    multi_cfg = {"graphs": train_cfgs, "env_class": method.env, "seed": cfg.run.seed}
    env = MultiGraphEnv(multi_cfg)
    say(f"padding {n} nodes / {e} edges; {env.observation_space['x'].shape[1]} features; "
        f"devices {', '.join(env.devices)}")
    started = start_or_join(num_cpus=max(1, cfg.run.env_runners + 1))  # or a running one, as train's
    try:
        ac = algo_config(cfg, method, multi_cfg, False, env.steps_per_episode)
        ac = ac.environment(MultiGraphEnv, env_config=multi_cfg)
        algo = ac.build_algo()
        t0, steps, it = time.time(), 0, 0
        imitation = None
        if imitate_steps > 0:
            from policies.imitate import imitate

            learner_module = algo.learner_group._learner.module[DEFAULT_MODULE_ID]
            imitation = imitate(learner_module, env.envs, imitate_steps, lr=cfg.learning.lr, seed=cfg.run.seed,
                                say=say)
            algo.env_runner_group.sync_weights(from_worker_or_learner_group=algo.learner_group,
                                               inference_only=True)
            say(f"imitation: loss {imitation['loss_before']:.3f} -> {imitation['loss_after']:.3f} "
                f"in {imitation['wall_s']:.0f} s")
        while steps < cfg.run.budget:
            result = algo.train()
            it += 1
            steps = int(result.get("env_runners", {}).get("num_env_steps_sampled_lifetime", steps) or steps)
            if it % 10 == 0:
                ret = result.get("env_runners", {}).get("episode_return_mean")
                say(f"  iteration {it}: {steps} placements, mean episode return "
                    f"{ret if ret is None else round(float(ret), 4)} ({time.time() - t0:.0f} s)")
        module = algo.learner_group._learner.module[DEFAULT_MODULE_ID] if hasattr(
            algo.learner_group, "_learner") and algo.learner_group._learner else algo.get_module()
        local = _local_env(algo)
        per_graph = local.graph_stats() if isinstance(local, MultiGraphEnv) else []
        from hsdag_ray.run.resolve import resolved

        cfg = resolved(cfg)  # what --guide decides, written out
        # what train --init adopts from the checkpoint: the network, features and episode
        own = (cfg.run.method,) if cfg.run.method in SECTIONS else ()
        settings = {f"{section}.{name}": getattr(getattr(cfg, section), name)
                    for section in own + ("features",) for name in settings_of(SECTIONS[section])}
        settings.update({"env.coarsen": cfg.env.coarsen, "env.incumbent": cfg.env.incumbent,
                         "learning.episode_len": cfg.learning.episode_len})
        meta = {"method": cfg.run.method, "family": family, "model_config":
                method.model_config(cfg) if method.model_config else {},
                "settings": settings, "reward": cfg.learning.reward, "devices": devices,
                "num_features": int(env.observation_space["x"].shape[1]),
                "train_graphs": [g.spec for g in fam.train],
                "held_out_graphs": [g.spec for g in fam.held_out],
                "placements": steps, "iterations": it, "wall_s": time.time() - t0,
                "imitation": {k: v for k, v in (imitation or {}).items() if k != "optima"},
                "per_graph": per_graph}
        path = save_pretrained(out_dir, module, meta)
        algo.stop()
    finally:
        if started:
            ray.shutdown()
    say(f"pre-trained {cfg.run.method} on {len(fam.train)} graphs of {family}: {steps} placements, "
        f"{it} iterations, {meta['wall_s']:.0f} s; checkpoint {path}")
    return meta


#: pre-training's own defaults where train's differ: scale-free features (measured to
#: transfer to held-out graphs where the raw costs did not), and HSDAG sampling as the
#: paper, without the incumbent prior (the pre-training figures of docs/results/transfer.md were measured so)
PRETRAIN_DEFAULTS = {"env_runners": 0, "relative": True, "incumbent_prior": 0.0}


def default_budget(method: str, imitate_steps: int, fallback: int = DEFAULT_BUDGET) -> int:
    """Placements of reinforcement when the run names no ``--budget``: after imitation the
    method's own (``Method.budget_after_imitation``: 0 for Placeto), else ``fallback``."""
    from policies.registry import METHODS

    own = METHODS[method].budget_after_imitation if method in METHODS else None
    return own if imitate_steps > 0 and own is not None else fallback
