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

import dataclasses
import json
import math
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from hsdag_ray import console
from hsdag_ray.algos import algo_config
from hsdag_ray.baselines import compute_baselines
from hsdag_ray.cli import UsageError, run
from hsdag_ray.config import MEASURE_RESOURCE, TrainConfig, config_from_args
from hsdag_ray.resolve import env_config, resolve_backend
from hsdag_ray.rundir import Run

__all__ = ["TrainConfig", "MEASURE_RESOURCE", "train", "main", "config_from_args"]


def train(cfg: TrainConfig, resume: Optional[Path] = None, quiet: bool = False,
          on_iteration: Optional[Callable[[Any, dict[str, Any]], None]] = None) -> dict[str, Any]:
    """Run (or continue) a training run; return its summary.

    ``on_iteration(algo, metrics_row)`` is called after every iteration with
    the RLlib algorithm and the row written to ``metrics.jsonl``.
    """
    import numpy as np
    import ray

    from envs.placement_env import EnvConfig
    from envs.store import StoreClient, store_actor
    from hsdag_ray import plots
    from hsdag_ray.tracking import Tracker
    from policies.registry import get, load

    import torch

    say = console.say(quiet)
    t_start = time.time()
    method = get(cfg.method)
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
        cfg_run = dataclasses.replace(cfg, env_runners=env_runners, algo=cfg.algo or method.algo)
        env_cfg = env_config(cfg_run, backend, devices, profile, store_name)
        env = load(method.env)(EnvConfig.from_dict(env_cfg))
        say(f"graph {env.graph.name}: {env.graph.num_nodes} nodes after {cfg.coarsen} coarsening; "
            f"devices {', '.join(env.devices)}; backend {env.backend.name}")
        baselines = state.get("baselines") or compute_baselines(env, cfg.objective, say)
        state["baselines"] = baselines
        (run_dir.dir / "config.json").write_text(json.dumps(
            {"train": asdict(cfg), "resolved": {"backend": backend, "devices": devices,
                                                "env_runners": env_runners}}, indent=1))
        algo = algo_config(cfg_run, method, env_cfg, real, env.steps_per_episode).build_algo()
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
        summary = _finish(cfg_run, run_dir, env, store, state, baselines, backend, t_cpu, plots, say)
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
