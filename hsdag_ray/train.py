"""Learn a placement: ``python -m hsdag_ray.train``.

With no arguments: a local Ray, HSDAG trained with REINFORCE on ResNet-50 for
500 measured placements, W&B offline. On a machine with two or more real
OpenVINO devices (e.g. CPU and GPU) placements are measured on them; with
only a CPU the simulator is used, with the local CPU profiled by OpenVINO and
a modeled accelerator (``GPU_MODEL``), and the run says so. Examples::

    python -m hsdag_ray.train
    python -m hsdag_ray.train --model bert_base --budget 1000 --env-runners 2
    python -m hsdag_ray.train --backend auto --devices CPU,CPU_F32 --model tiny_cnn --budget 60
    python -m hsdag_ray.train --config sweep/run.yaml --seed 3
    python -m hsdag_ray.train --address auto --backend auto --devices CPU,GPU   # on a cluster
    python -m hsdag_ray.train --resume runs/resnet50-hsdag-20261122-101500

Outputs go to a run folder (``--out``, default ``runs/``): ``config.json``,
``metrics.jsonl``, ``best_placement.json`` (OpenVINO op name -> device),
``summary.json``, ``learning_curve.png``, ``placement.png`` and
``checkpoint/``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from hsdag_ray.cli import UsageError, run

__all__ = ["TrainConfig", "MEASURE_RESOURCE", "train", "main"]

#: the custom Ray resource a measuring machine advertises once (one measurement at a time)
MEASURE_RESOURCE = "measure_slot"
BACKEND_CHOICES = ("default", "simulator", "auto", "hetero", "pipeline")
ALGOS = ("reinforce", "ppo")


@dataclass
class TrainConfig:
    """One training run. The command line and a YAML file (``--config``) fill it.

    Attributes:
        model: zoo name (resnet50, inception_v3, bert_base, tiny_cnn) or .xml/.onnx file.
        method: placement method; ``hsdag`` (the paper).
        algo: ``reinforce`` (the paper) or ``ppo``.
        backend: ``default`` (real devices when the machine has two, else the
            simulator), ``simulator``, ``auto``, ``hetero`` or ``pipeline``.
        devices: device names; empty = chosen with the backend.
        profile: profile JSON: the simulator's costs (empty = record the local
            CPU and model an accelerator); with a real backend, the costs the
            exact solver's placement is computed on before it is measured.
        objective: simulator objective: sequential, parallel or throughput.
        coarsen: graph coarsening before learning: none, colocation, openvino.
        budget: placements the policy proposes, each measured or (when proposed
            before) read from the cache (the paper: about 500); training stops
            after the iteration that reaches it, so it rounds up to whole
            iterations (episode_len x episodes_per_iteration placements each).
        episode_len: placements per episode (the paper: 20).
        episodes_per_iteration: episodes per policy update.
        env_runners: measuring actors (0 = sample in the driver).
        lr: Adam learning rate (the paper: 1e-3).
        entropy_coeff: entropy bonus weight (keeps the policy moving when a
            whole batch fails; see policies/reinforce.py).
        advantages: rank (fitness shaping, default), normalized or centered
            (see policies/reinforce.py).
        reward: inverse (1/latency, the paper), speedup, neg_log.
        hidden_dim / gcn_layers / node_state_update: HSDAG network settings.
        grouping_noise: Gumbel noise on the edge scores when sampling groupings
            (0 = the deterministic parsing of inference).
        self_loops: a node may choose its own loop in graph parsing and stay
            a group of its own (off: it slowed learning; see policies/hsdag.py).
        no_fractal / no_shape / no_cost / no_op_type / no_degree: feature
            ablations (leave that feature group out).
        position: node position feature: id, sin or none.
        seed: random seed.
        wandb: offline, online or disabled.
        wandb_project: W&B project name.
        out: folder of run folders.
        name: run folder name (default: model-method-time).
        checkpoint_every: iterations between checkpoints.
        address: Ray address to join (``auto`` for a running cluster); empty = local Ray.
        repeats / threads / timeout: timing of real measurements.
        failure_factor: a failed placement counts as this many times the reference latency.
        torch_threads: threads of every torch process (driver, learner, EnvRunners);
            more than one on a small machine shared with Ray and OpenVINO makes
            each update many times slower (threads spin waiting for each other).
    """

    model: str = "resnet50"
    method: str = "hsdag"
    algo: str = "reinforce"
    backend: str = "default"
    devices: list[str] = field(default_factory=list)
    profile: str = ""
    objective: str = "sequential"
    coarsen: str = "colocation"
    budget: int = 500
    episode_len: int = 20
    episodes_per_iteration: int = 1
    env_runners: int = 1
    lr: float = 1e-3
    entropy_coeff: float = 0.01
    advantages: str = "rank"
    reward: str = "inverse"
    hidden_dim: int = 64
    gcn_layers: int = 2
    node_state_update: bool = True
    grouping_noise: float = 0.3
    self_loops: bool = False
    no_fractal: bool = False
    no_shape: bool = False
    no_op_type: bool = False
    no_degree: bool = False
    no_cost: bool = False
    position: str = "id"
    seed: int = 0
    wandb: str = "offline"
    wandb_project: str = "hsdag_ray"
    out: str = "runs"
    name: str = ""
    checkpoint_every: int = 5
    address: str = ""
    repeats: int = 5
    threads: int = 1
    timeout: float = 120.0
    failure_factor: float = 10.0
    torch_threads: int = 1

    def validate(self) -> None:
        from envs.placement_env import REWARDS
        from envs.simulator import OBJECTIVES
        from hsdag_ray.graph import COARSENINGS
        from policies.reinforce import ADVANTAGES

        checks = [
            (self.method == "hsdag", f"unknown method {self.method!r}; this command trains hsdag"),
            (self.algo in ALGOS, f"unknown algo {self.algo!r}; choose {' or '.join(ALGOS)}"),
            (self.backend in BACKEND_CHOICES,
             f"unknown backend {self.backend!r}; choose one of {', '.join(BACKEND_CHOICES)}"),
            (self.objective in OBJECTIVES,
             f"unknown objective {self.objective!r}; choose one of {', '.join(OBJECTIVES)}"),
            (self.coarsen in COARSENINGS,
             f"unknown coarsening {self.coarsen!r}; choose one of {', '.join(COARSENINGS)}"),
            (self.advantages in ADVANTAGES,
             f"unknown advantages {self.advantages!r}; choose one of {', '.join(ADVANTAGES)}"),
            (self.entropy_coeff >= 0 and self.grouping_noise >= 0,
             "entropy_coeff and grouping_noise must be 0 or more"),
            (self.reward in REWARDS, f"unknown reward {self.reward!r}; choose one of {', '.join(REWARDS)}"),
            (self.position in ("id", "sin", "none"), "position must be id, sin or none"),
            (self.wandb in ("offline", "online", "disabled"), "wandb must be offline, online or disabled"),
            (self.budget >= 1, "budget must be at least 1 placement"),
            (self.episode_len >= 1 and self.episodes_per_iteration >= 1,
             "episode_len and episodes_per_iteration must be at least 1"),
            (self.env_runners >= 0, "env_runners must be 0 or more"),
            (self.lr > 0, "lr must be positive"),
            (self.checkpoint_every >= 1, "checkpoint_every must be at least 1"),
            (self.torch_threads >= 1, "torch_threads must be at least 1"),
            (self.repeats >= 1 and self.threads >= 0 and self.timeout > 0,
             "repeats must be >= 1, threads >= 0 and timeout > 0"),
        ]
        for ok, msg in checks:
            if not ok:
                raise UsageError(msg)
        if self.profile and not Path(self.profile).is_file():
            raise UsageError(f"profile file {self.profile} does not exist; record one with "
                             "python -m hsdag_ray.profile")

    def features(self):
        from hsdag_ray.features import FeatureConfig

        return FeatureConfig(op_type=not self.no_op_type, shape=not self.no_shape,
                             degree=not self.no_degree, fractal=not self.no_fractal,
                             position=self.position, cost=not self.no_cost)

    @classmethod
    def from_yaml(cls, path: str) -> dict[str, Any]:
        import yaml

        p = Path(path)
        if not p.is_file():
            raise UsageError(f"config file {path} does not exist")
        try:
            data = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise UsageError(f"config file {path} is not valid YAML ({str(e).splitlines()[0]})") from None
        if not isinstance(data, dict):
            raise UsageError(f"config file {path} must be a mapping of settings")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise UsageError(f"unknown setting {unknown[0]!r} in {path}; settings are the "
                             "long options of --help without dashes")
        return data


# ============================================================ command line
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m hsdag_ray.train", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", help="YAML file with any of the settings below (flags win)")
    ap.add_argument("--resume", metavar="RUN_DIR", help="continue the run in this folder")
    defaults = TrainConfig()
    doc = _field_docs()
    for f in fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name)
        help_text = doc.get(f.name, "")
        if isinstance(default, bool):
            ap.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif isinstance(default, list):
            ap.add_argument(flag, default=None, help=help_text + " (comma-separated)")
        else:
            ap.add_argument(flag, type=type(default), default=None,
                            help=f"{help_text} (default: {default if default != '' else 'none'})")
    return ap


def _field_docs() -> dict[str, str]:
    doc = TrainConfig.__doc__ or ""
    out: dict[str, str] = {}
    current: list[str] = []
    text: list[str] = []
    for line in doc.split("Attributes:")[-1].splitlines():
        s = line.strip()
        if not s:
            continue
        head, _, rest = s.partition(":")
        names = [h.strip() for h in head.split("/")]
        if rest and all(n.isidentifier() for n in names):
            for n in current:
                out[n] = " ".join(text)
            current, text = names, [rest.strip()]
        else:
            text.append(s)
    for n in current:
        out[n] = " ".join(text)
    return out


def config_from_args(argv: Optional[Sequence[str]]) -> tuple[TrainConfig, Optional[Path]]:
    args = build_parser().parse_args(argv)
    values: dict[str, Any] = {}
    resume = Path(args.resume) if args.resume else None
    if resume is not None:
        cfg_file = resume / "config.json"
        if not cfg_file.is_file():
            raise UsageError(f"{resume} is not a run folder (no config.json); pass the folder "
                             "a previous run printed")
        values.update(json.loads(cfg_file.read_text())["train"])
    if args.config:
        values.update(TrainConfig.from_yaml(args.config))
    for f in fields(TrainConfig):
        v = getattr(args, f.name)
        if v is not None:
            values[f.name] = v
    if isinstance(values.get("devices"), str):
        values["devices"] = [d for d in values["devices"].split(",") if d]
    try:
        cfg = TrainConfig(**values)
    except TypeError as e:
        raise UsageError(f"bad settings: {e}") from None
    cfg.validate()
    return cfg, resume


# ================================================================== set-up
def default_profile(model: str, say) -> "Any":
    """The local CPU profiled with OpenVINO plus a modeled accelerator, cached."""
    from hsdag_ray.models import cache_dir
    from hsdag_ray.profile import Profile, record

    path = cache_dir().parent / "profiles" / f"{Path(model).stem}-CPU-GPU_MODEL.json"
    if path.is_file():
        return Profile.load(path), path
    say(f"profiling {model} on the local CPU with OpenVINO (once; cached in {path.parent})")
    prof = record(model, ["CPU"], ["GPU_MODEL"], fit=0, progress=False)
    # one stage boundary costs about half a millisecond on CPU devices (fitted on
    # ResNet-50 splits); without it fine-grained placements look free
    prof.boundary_s = 5e-4
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.save(path)
    return prof, path


def resolve_backend(cfg: TrainConfig, say) -> tuple[str, list[str], Optional[dict]]:
    """Backend kind, device names and profile (as a dict) for the run."""
    from hsdag_ray.profile import Profile

    backend, devices = cfg.backend, list(cfg.devices)
    if backend == "default":
        import openvino as ov

        real = [d for d in ov.Core().available_devices]
        if len(real) >= 2:
            backend, devices = "auto", devices or real
            say(f"measuring on the real devices {', '.join(devices)}")
        else:
            backend = "simulator"
            say(f"only {', '.join(real) or 'no device'} here: using the simulator with the CPU "
                "profiled by OpenVINO and a modeled accelerator (GPU_MODEL); pass --backend auto "
                "--devices CPU,CPU_F32 to measure on two CPU configurations instead")
    if backend == "simulator":
        if cfg.profile:
            prof = Profile.load(cfg.profile)
        else:
            prof, path = default_profile(cfg.model, say)
        devices = devices or prof.device_names
        missing = [d for d in devices if d not in prof.devices]
        if missing:
            raise UsageError(f"device {missing[0]} is not in the profile (it has "
                             f"{', '.join(prof.device_names)})")
        return backend, devices, prof.to_json()
    from hsdag_ray.measure import resolve_devices

    devices = resolve_devices(devices or ["CPU", "CPU_F32"], cfg.threads)
    if len(devices) < 2:
        raise UsageError("placement needs at least two devices; add one with --devices")
    # a profile of the same devices lets the exact solvers' placement be measured too
    return backend, devices, Profile.load(cfg.profile).to_json() if cfg.profile else None


def env_config(cfg: TrainConfig, backend: str, devices: list[str], profile: Optional[dict],
               store: str) -> dict[str, Any]:
    from envs.base import TimingConfig

    timing = TimingConfig(repeats=cfg.repeats, threads=cfg.threads, timeout_s=cfg.timeout)
    return {"model": cfg.model, "coarsen": cfg.coarsen, "backend": backend, "devices": devices,
            "profile": profile, "objective": cfg.objective, "reward": cfg.reward,
            "episode_len": cfg.episode_len, "failure_factor": cfg.failure_factor,
            "features": asdict(cfg.features()), "timing": asdict(timing), "store": store}


def algo_config(cfg: TrainConfig, env_cfg: dict, real: bool, slots: int):
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from envs.placement_env import PlacementEnv
    from policies.hsdag import HSDAGRLModule
    from policies.reinforce import REINFORCEConfig

    model_config = {"hidden_dim": cfg.hidden_dim, "num_gcn_layers": cfg.gcn_layers,
                    "node_state_update": cfg.node_state_update, "max_seq_len": cfg.episode_len,
                    "grouping_noise": cfg.grouping_noise, "self_loops": cfg.self_loops}
    if cfg.algo == "ppo":
        from ray.rllib.algorithms.ppo import PPOConfig

        ac = PPOConfig().training(
            lr=cfg.lr, entropy_coeff=cfg.entropy_coeff, gamma=0.0, lambda_=0.0,
            train_batch_size_per_learner=cfg.episode_len * cfg.episodes_per_iteration,
            minibatch_size=cfg.episode_len, num_epochs=4)
    else:
        ac = REINFORCEConfig().training(lr=cfg.lr, entropy_coeff=cfg.entropy_coeff,
                                        advantages=cfg.advantages,
                                        episodes_per_iteration=cfg.episodes_per_iteration)
    ac = (ac.environment(PlacementEnv, env_config=env_cfg)
          .rl_module(rl_module_spec=RLModuleSpec(module_class=HSDAGRLModule, model_config=model_config))
          .env_runners(num_env_runners=cfg.env_runners, rollout_fragment_length=cfg.episode_len,
                       batch_mode="complete_episodes", num_cpus_per_env_runner=0 if real else 1,
                       custom_resources_per_env_runner={MEASURE_RESOURCE: 1} if real and cfg.env_runners else {})
          .fault_tolerance(restart_failed_env_runners=True, delay_between_env_runner_restarts_s=1.0)
          .debugging(seed=cfg.seed))
    import torch

    if torch.cuda.is_available():
        ac = ac.learners(num_gpus_per_learner=1)
    return ac


# ================================================================ training
class Run:
    """A run folder: config, metrics, checkpoints, outputs."""

    def __init__(self, cfg: TrainConfig, resume: Optional[Path]) -> None:
        if resume is not None:
            self.dir = resume
        else:
            name = cfg.name or f"{Path(cfg.model).stem}-{cfg.method}-{time.strftime('%Y%m%d-%H%M%S')}"
            self.dir = Path(cfg.out) / name
            if self.dir.exists() and any(self.dir.iterdir()):
                raise UsageError(f"run folder {self.dir} exists already; choose another --name or "
                                 f"continue it with --resume {self.dir}")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.metrics = self.dir / "metrics.jsonl"
        self.state_file = self.dir / "state.json"

    def state(self) -> dict[str, Any]:
        if self.state_file.is_file():
            return json.loads(self.state_file.read_text())
        return {"iteration": 0, "log_index": 0, "wall_s": 0.0, "latencies": []}

    def save_state(self, state: dict[str, Any]) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(self.state_file)

    def append_metrics(self, row: dict[str, Any]) -> None:
        with self.metrics.open("a") as f:
            f.write(json.dumps(row) + "\n")


def _say(quiet: bool):
    from rich.console import Console

    console = Console(stderr=True, highlight=False, soft_wrap=True)
    return (lambda msg: None) if quiet else (lambda msg: console.print(msg))


def exact_method(graph, objective: str) -> Optional[str]:
    """The exact solver that applies to ``objective`` on ``graph``, if any."""
    import numpy as np

    if objective == "sequential":
        limited = bool(np.isfinite(graph.mem_capacity).any())
        return "mincut" if graph.num_devices == 2 and not limited else "milp"
    if objective == "throughput":
        return "milp"
    return None


def compute_baselines(env, objective: str, say, time_limit: float = 120.0) -> dict[str, float]:
    """Single-device latencies; with a real backend, OpenVINO AUTO's
    (``openvino_auto``: the whole model on the device AUTO picks); and, where an
    exact solver applies to the profile, the latency of its optimal placement
    (``optimum``), measured by the run's own backend (so on hardware with a
    real backend)."""
    from hsdag_ray.profile import Profile, cost_graph
    from policies.exact import solve

    baselines = {f"{d}_only": v for d, v in env.single_device_s.items()}
    if env.config.backend != "simulator":
        from envs.openvino_backend import measure_auto

        m = measure_auto(env.config.model, env.devices, env.config.timing)
        baselines["openvino_auto"] = m.latency_s if m.ok else math.inf
        ran_on = ",".join(m.info.get("execution_devices") or []) or "?"
        say(f"OpenVINO AUTO ({m.info.get('auto_device', 'AUTO')}, ran on {ran_on}): "
            + (f"{m.latency_s * 1e3:.3f} ms" if m.ok else f"failed: {m.error}"))
    if env.config.profile is None:
        return baselines
    prof = Profile.from_json(env.config.profile)
    if any(d not in prof.devices for d in env.devices):
        return baselines
    cg = cost_graph(env.graph, prof, env.devices)
    method = exact_method(cg, objective)
    if method is None:
        return baselines
    res = solve(cg, objective, method, time_limit=time_limit)
    if not res.feasible:
        say(f"exact solver {method}: {res.status}")
        return baselines
    m = env.measure_untracked(res.placement)
    baselines["optimum"] = m.latency_s if m.ok else math.inf
    gap = "" if res.optimal else f" (not proven optimal: gap {res.gap:.1%})"
    say(f"exact optimum on the profile ({method}): {res.value * 1e3:.3f} ms, measured "
        f"{baselines['optimum'] * 1e3:.3f} ms{gap}")
    return baselines


def train(cfg: TrainConfig, resume: Optional[Path] = None, quiet: bool = False,
          on_iteration: Optional[Callable[[Any, dict[str, Any]], None]] = None) -> dict[str, Any]:
    """Run (or continue) a training run; return its summary.

    ``on_iteration(algo, metrics_row)`` is called after every iteration with
    the RLlib algorithm and the row written to ``metrics.jsonl``.
    """
    import numpy as np
    import ray

    from envs.placement_env import EnvConfig, PlacementEnv
    from envs.store import StoreClient, store_actor
    from hsdag_ray import plots
    from hsdag_ray.tracking import Tracker

    import torch

    say = _say(quiet)
    t_start = time.time()
    torch.set_num_threads(cfg.torch_threads)
    run_dir = Run(cfg, resume)
    backend, devices, profile = resolve_backend(cfg, say)
    real = backend != "simulator"
    os.environ.setdefault("WANDB_MODE", "offline" if cfg.wandb != "online" else "online")
    started_ray = False
    if not ray.is_initialized():
        init_kw: dict[str, Any] = {
            "include_dashboard": False, "log_to_driver": False, "configure_logging": False,
            "runtime_env": {"env_vars": {"OMP_NUM_THREADS": str(cfg.torch_threads),
                                         "WANDB_MODE": os.environ["WANDB_MODE"]}}}
        if cfg.address:
            init_kw["address"] = cfg.address
        elif real:
            init_kw["resources"] = {MEASURE_RESOURCE: 1}
        ray.init(**init_kw)
        started_ray = True
    try:
        store_name = f"hsdag_store_{run_dir.dir.resolve().as_posix().replace('/', '_')}"[-120:]
        store = StoreClient(store_actor(store_name))
        state = run_dir.state()
        if resume is not None and (run_dir.dir / "store.json").is_file():
            store.set_state(json.loads((run_dir.dir / "store.json").read_text()))
        env_runners = cfg.env_runners
        if real and env_runners:
            slots = int(ray.cluster_resources().get(MEASURE_RESOURCE, 0))
            if slots < 1:
                raise UsageError(f"no machine in the cluster advertises the {MEASURE_RESOURCE!r} "
                                 "resource; start measuring nodes as in cluster/config.yaml")
            if env_runners > slots:
                say(f"{slots} measuring machine(s): using {slots} EnvRunner(s), one per machine")
                env_runners = slots
        cfg_run = dataclasses.replace(cfg, env_runners=env_runners)
        env_cfg = env_config(cfg_run, backend, devices, profile, store_name)
        env = PlacementEnv(EnvConfig.from_dict(env_cfg))
        say(f"graph {env.graph.name}: {env.graph.num_nodes} nodes after {cfg.coarsen} coarsening; "
            f"devices {', '.join(env.devices)}; backend {env.backend.name}")
        baselines = state.get("baselines") or compute_baselines(env, cfg.objective, say)
        state["baselines"] = baselines
        (run_dir.dir / "config.json").write_text(json.dumps(
            {"train": asdict(cfg), "resolved": {"backend": backend, "devices": devices,
                                                "env_runners": env_runners}}, indent=1))
        algo = algo_config(cfg_run, env_cfg, real, env_runners).build_algo()
        ckpt = run_dir.dir / "checkpoint"
        if resume is not None and ckpt.is_dir():
            algo.restore_from_path(str(ckpt))
            say(f"resumed {run_dir.dir} at iteration {state['iteration']}")
        tracker = Tracker(cfg.wandb, cfg.wandb_project, run_dir.dir, asdict(cfg),
                          name=run_dir.dir.name, resume=resume is not None)
        cpu_name = "CPU" if "CPU" in env.devices else env.devices[0]
        t_cpu = env.single_device_s.get(cpu_name, math.nan)
        t_best_single = min(env.single_device_s.values())
        wall_before = state["wall_s"]
        t_loop = time.time()
        while store.stats()["placements"] < cfg.budget:
            t_it = time.time()
            result = algo.train()
            state["iteration"] += 1
            new = store.log_since(state["log_index"])
            state["log_index"] += len(new)
            lat = [e["latency_s"] if e["ok"] else math.inf for e in new]
            state["latencies"] += [x if math.isfinite(x) else None for x in lat]
            stats = store.stats()
            best = stats["best_latency_s"]
            learner = result.get("learners", {}).get("default_policy", {})
            ok_lat = [x for x in lat if math.isfinite(x)]
            row = {"iteration": state["iteration"], "placements": stats["placements"],
                   "measurements": stats["measurements"],
                   "failures": stats["failures"], "cache_hits": stats["cache_hits"],
                   "latency_mean_s": float(np.mean(ok_lat)) if ok_lat else None,
                   "latency_min_s": min(ok_lat) if ok_lat else None, "best_latency_s": best,
                   "speedup_vs_cpu": (1 - best / t_cpu) if best and math.isfinite(t_cpu) else None,
                   "speedup_vs_best_single": (1 - best / t_best_single) if best and math.isfinite(t_best_single) else None,
                   "entropy": _num(learner.get("entropy")), "num_groups": _num(learner.get("num_groups")),
                   "policy_loss": _num(learner.get("policy_loss")),
                   "measurements_per_s": len(new) / max(time.time() - t_it, 1e-9),
                   "wall_s": wall_before + time.time() - t_loop}
            run_dir.append_metrics(row)
            tracker.log(row, step=state["iteration"])
            if on_iteration is not None:
                on_iteration(algo, row)
            groups = f"groups {row['num_groups']:5.1f}  " if row["num_groups"] is not None else ""
            best_ms = f"{best * 1e3:8.3f} ms" if best else "    none"
            say(f"iter {row['iteration']:>3}  placements {row['placements']:>4}/{cfg.budget} "
                f"({row['measurements']} measured)  best {best_ms}  "
                f"speedup vs {cpu_name} {(row['speedup_vs_cpu'] or 0) * 100:5.1f}%  "
                f"{groups}{row['measurements_per_s']:.1f} meas/s")
            state["wall_s"] = row["wall_s"]
            if state["iteration"] % cfg.checkpoint_every == 0:
                _checkpoint(algo, store, run_dir, state)
        _checkpoint(algo, store, run_dir, state)
        summary = _finish(cfg, run_dir, env, store, state, baselines, backend, t_cpu, plots, say)
        tracker.finish(summary, [run_dir.dir / "best_placement.json", run_dir.dir / "placement.png",
                                 run_dir.dir / "learning_curve.png"])
        algo.stop()
        summary["wall_s"] = time.time() - t_start + wall_before
        (run_dir.dir / "summary.json").write_text(json.dumps(summary, indent=1))
        return summary
    finally:
        if started_ray:
            ray.shutdown()


def _num(v) -> Optional[float]:
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None


def _checkpoint(algo, store, run_dir: Run, state: dict[str, Any]) -> None:
    ckpt = run_dir.dir / "checkpoint"
    algo.save_to_path(str(ckpt))
    tmp = run_dir.dir / "store.json.tmp"
    tmp.write_text(json.dumps(store.get_state()))
    tmp.replace(run_dir.dir / "store.json")
    run_dir.save_state(state)


def _finish(cfg, run_dir: Run, env, store, state, baselines, backend, t_cpu, plots, say) -> dict:
    import numpy as np

    best = store.best()
    summary: dict[str, Any] = {
        "model": cfg.model, "method": cfg.method, "algo": cfg.algo, "backend": env.backend.name,
        "objective": cfg.objective if backend == "simulator" else "measured",
        "devices": env.devices, "seed": cfg.seed, "iterations": state["iteration"],
        "placements": store.stats()["placements"],
        "measurements": store.stats()["measurements"], "failures": store.stats()["failures"],
        "baselines": baselines, "best_latency_s": None, "speedup_vs_cpu": None,
        "run_dir": str(run_dir.dir)}
    if best is not None:
        p = np.asarray(best["placement"])
        node_placement = {nm: env.devices[int(d)] for nm, d in zip(env.graph.names, p)}
        (run_dir.dir / "best_placement.json").write_text(
            json.dumps(env.graph.expand_placement(node_placement), indent=1))
        summary["best_latency_s"] = best["latency_s"]
        if math.isfinite(t_cpu):
            summary["speedup_vs_cpu"] = 1 - best["latency_s"] / t_cpu
        if backend != "simulator":
            m = env.backend.measure(node_placement)  # not cached: a fresh measurement
            summary["best_remeasured_s"] = m.latency_s if m.ok else None
        plots.placed_graph(env.graph, node_placement, env.devices, run_dir.dir / "placement.png",
                           title=f"{cfg.model}: best placement ({best['latency_s'] * 1e3:.3f} ms)")
    lat = [x if x is not None else math.inf for x in state["latencies"]]
    plots.learning_curve(lat, run_dir.dir / "learning_curve.png", baselines,
                         title=f"{cfg.model} / {cfg.method} / {env.backend.name}")
    best_ms = f"{summary['best_latency_s'] * 1e3:.3f} ms" if best is not None else "none"
    say(f"best {best_ms} after {summary['measurements']} placements; outputs in {run_dir.dir}")
    return summary


def main(argv: Optional[Sequence[str]] = None) -> int:
    cfg, resume = config_from_args(argv)
    summary = train(cfg, resume)
    print(json.dumps({k: summary[k] for k in ("model", "best_latency_s", "speedup_vs_cpu",
                                              "measurements", "run_dir")}))
    return 0


if __name__ == "__main__":
    sys.exit(run(main, prog="hsdag_ray.train"))
