r"""Placing graphs never seen in training: zero-shot and fine-tuning, pre-trained vs from scratch.

    python bench/bench_transfer.py                                   # synthetic family
    python bench/bench_transfer.py --family real --methods hsdag --pretrain-budget 6000
    python bench/bench_transfer.py --family real --imitate-steps 300 --pretrain-budget 500 \
        --finetune-budget 300 --finetune-graphs 5 --seeds 0,1 --methods hsdag,placeto   # figures in docs/results/transfer.md
    python bench/bench_transfer.py --family real --accelerator NPU_MODEL --methods hsdag \
        --imitate-steps 300 --pretrain-budget 500 --finetune-graphs 5 --seeds 0,1,2 \
        --pretrain-set incumbent_prior=2 --init-soften 0.3    # where memory does not decide
    python bench/bench_transfer.py --family real-wide --accelerator NPU_MODEL --methods placeto \
        --imitate-steps 300 --pretrain-budget 0 --finetune-graphs 0 \
        --graphs tv:googlenet,hf:roberta,hf:gpt_neo:num_layers=4   # graphs of no family

For each method: pre-train on the family's training graphs
(:func:`hsdag_ray.run.pretraining.pretrain`), then on every held-out graph (simulator,
``CPU_MODEL`` + ``--accelerator``: by default ``GPU_PARTMEM``, holding half the
graph's weights, where the memory limit decides most of the optimum;
``NPU_MODEL``, unlimited memory but slow on memory-bound ops, where the kind of
op decides; sequential objective, the exact optimum from the MILP solver):

* zero-shot: best/optimum of the policy's greedy placement (1 inference) and of
  its best of 10 (greedy + 9 sampled), made to fit the devices' memory
  (:func:`hsdag_ray.run.pretrained.infer_placements`), and the same before that
  repair ("unrepaired"), next to random placements (1 and best of 10, mean over
  20 draws) and the best single device;
* fine-tuning: measured placements until one is within 1.05x and 1.01x of the
  optimum, from the pre-trained weights (``--init``: the first measurement is
  the policy's greedy placement) and from scratch, at the same
  ``--finetune-budget`` (``>B`` = not reached in B); the pre-trained runs spread
  nothing (``init_soften`` 1, whatever the method's own factor); with ``--init-soften F`` also
  from the pre-trained weights spread once after loading (``train --init-soften``).

``--reuse`` takes the pre-trained policies already in ``--out`` and the fine-tuning
runs already finished there (``runs/``, one folder per method, kind, graph and seed).

Prints markdown tables. Zero-shot needs no Ray; the fine-tuning runs share one
local Ray.
"""
from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from hsdag_ray.run.pretraining import file_slug


def zero_shot_rows(method: str, pre: Path, family: str, base: dict, seeds: int = 20,
                   accelerator: str = "GPU_PARTMEM", graphs: Sequence[str] = ()) -> list[dict]:
    """Zero-shot figures on ``family``'s held-out graphs, or on ``graphs`` (model specs) when given."""
    from hsdag_ray.run.config import TrainConfig
    from hsdag_core.families import FamilyGraph, get_family
    from hsdag_core.device_profile import Profile, cost_graph
    from hsdag_ray.run.pretraining import graph_configs
    from hsdag_ray.run.pretrained import adopt_settings, build_module, infer_placements, read_pretrained
    from policies.solvers.exact import solve
    from policies.registry import get, load

    m = get(method)
    ckpt = read_pretrained(pre)
    cfg = adopt_settings(TrainConfig.of(method=method, **base), ckpt)  # its features, as train --init
    rows = []
    placed = [FamilyGraph(g, "named") for g in graphs] or get_family(family).held_out
    for env_cfg in graph_configs(cfg, placed, None, accelerator=accelerator):
        env = load(m.env)(env_cfg)
        cg = cost_graph(env.graph, Profile.from_json(env_cfg["profile"]), env.devices)
        opt = solve(cg, "sequential", "milp", time_limit=60)
        lat = lambda p: env.reward_latency(env.measure_untracked(np.asarray(p)))  # noqa: E731
        t_opt = lat(opt.placement)
        module = build_module(ckpt, m, env)
        ps = infer_placements(module, env, 10, seed=0)
        one, ten = lat(ps[0]), min(lat(p) for p in ps)
        raw = infer_placements(module, env, 10, seed=0, fit=False)  # before the repair rule
        raw_one, raw_ten = lat(raw[0]), min(lat(p) for p in raw)
        rng = np.random.default_rng(0)
        n, D = env.graph.num_nodes, len(env.devices)
        rnd = [[lat(rng.integers(0, D, n)) for _ in range(10)] for _ in range(seeds)]
        single = min(env.single_device_s.values())
        rows.append({"graph": env.graph.name, "nodes": n, "optimum_s": t_opt,
                     "proven": bool(opt.optimal), "zero_shot_1": one / t_opt,
                     "zero_shot_10": ten / t_opt, "unrepaired_1": raw_one / t_opt,
                     "unrepaired_10": raw_ten / t_opt, "random_1": float(np.mean([r[0] for r in rnd])) / t_opt,
                     "random_10": float(np.mean([min(r) for r in rnd])) / t_opt,
                     "best_single": single / t_opt, "profile": env_cfg["profile"],
                     "optimum_placement": [int(d) for d in opt.placement]})
    return rows


def reach(store: Path, optimum_s: float, factor: float) -> float:
    """Measurements (in the order the run's store logged them, the first one of a run
    with ``--init`` being the policy's greedy placement) until one is within ``factor``
    of the optimum (inf: never)."""
    for i, e in enumerate(json.loads(store.read_text())["log"]):
        if e["ok"] and e["latency_s"] <= factor * optimum_s * (1 + 1e-9):
            return i + 1
    return math.inf


def finetune(method: str, pre: Path, graph: dict, base: dict, budget: int, out: Path,
             seed: int, memory_penalty: str = "repair", settings: Optional[dict] = None,
             init_soften: float = 1.0, reuse: bool = False, accelerator: str = "GPU_PARTMEM") -> dict:
    """Measurements to 1.05x / 1.01x of the optimum, pre-trained and from scratch, and with
    ``init_soften`` below 1 also pre-trained with the policy spread once after loading
    (``"softened"``). ``reuse``: a run whose folder in ``out`` is complete is read, not run again."""
    from hsdag_ray.run.config import TrainConfig
    from hsdag_core.families import family_devices
    from hsdag_core.device_profile import Profile
    from hsdag_ray.run.training import train

    out.mkdir(parents=True, exist_ok=True)
    prof_file = out / f"profile-{file_slug(graph['graph'])}.json"
    Profile.from_json(graph["profile"]).save(prof_file)
    res = {}
    kinds = [("pretrained", str(pre), 1.0), ("scratch", "", 1.0)]
    if init_soften < 1:
        kinds.insert(0, ("softened", str(pre), init_soften))
    for kind, init, soften in kinds:
        cfg = TrainConfig.of(method=method, model=graph["graph"], backend="simulator",
                          devices=family_devices(accelerator), profile=str(prof_file), init=init,
                          init_soften=soften,
                          budget=budget, env_runners=0, wandb="disabled", out=str(out), seed=seed,
                          name=run_name(method, kind, soften, graph["graph"], seed, settings),
                          memory_penalty=memory_penalty,
                          **{**base, **(settings or {})})
        done = out / cfg.run.name
        if reuse and (done / "summary.json").is_file():
            store = done / "store.json"
        else:
            store = Path(train(cfg, quiet=True, library_log=True)["run_dir"]) / "store.json"
        opt = graph["optimum_s"]
        res[kind] = (reach(store, opt, 1.05), reach(store, opt, 1.01))
    return res


def run_name(method: str, kind: str, soften: float, graph: str, seed: int,
             settings: Optional[dict] = None) -> str:
    """A fine-tuning run's folder name; the ``--finetune-set`` settings are part of it, so
    ``--reuse`` never reads back a run made without them."""
    given = "".join(f"-{k}={v}" for k, v in sorted((settings or {}).items()))
    name = f"{method}-{kind if soften == 1 else f'soften{soften:g}'}-{graph}-{seed}{given}"
    return file_slug(name)


def parse_settings(items: list[str]) -> dict:
    """``FIELD=VALUE`` strings as train settings, each value of its field's type."""
    from hsdag_ray.run.config import TrainConfig

    defaults = TrainConfig()
    out = {}
    for item in items:
        key, _, value = item.partition("=")
        if not hasattr(defaults, key):
            raise SystemExit(f"--finetune-set {item}: {key} is not a train setting")
        kind = type(getattr(defaults, key))
        out[key] = (value.lower() in ("1", "true", "yes")) if kind is bool else kind(value)
    return out


def fmt(x: float, budget: int) -> str:
    return f">{budget}" if math.isinf(x) else f"{int(x)}"  # >B: not within B placements


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", default="synthetic")
    ap.add_argument("--accelerator", default="GPU_PARTMEM",
                    help="the accelerator next to CPU_MODEL: GPU_PARTMEM (memory for half of each "
                         "graph's weights) or NPU_MODEL (unlimited memory, slow on memory-bound ops)")
    ap.add_argument("--methods", default="hsdag,placeto,gdp")
    ap.add_argument("--graphs", default="", metavar="SPECS",
                    help="comma-separated model specs to place instead of the family's held-out "
                         "graphs (keep them out of the family's training groups: e.g. "
                         "tv:googlenet,hf:roberta after --family real; the training graphs "
                         "themselves say how well pre-training fitted them)")
    ap.add_argument("--pretrain-budget", type=int, default=None,
                    help="placements of reinforcement in pre-training (default: 3000, or after "
                         "--imitate-steps the method's own, as python -m hsdag_ray.pretrain: "
                         "Placeto none)")
    ap.add_argument("--finetune-budget", type=int, default=300)
    ap.add_argument("--finetune-graphs", type=int, default=2,
                    help="held-out graphs fine-tuned on (the first ones); 0 = none")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--pretrain-seed", type=int, default=0,
                    help="seed of pre-training (--seeds are the fine-tuning runs')")
    ap.add_argument("--imitate-steps", type=int, default=0,
                    help="pre-training imitates each training graph's exact optimum for this many "
                         "steps before its --pretrain-budget placements of reinforcement")
    ap.add_argument("--hidden-dim", type=int, default=64)
    ap.add_argument("--relative-features", action=argparse.BooleanOptionalAction, default=True,
                    help="scale-free node features (pre-training's default), in every run")
    ap.add_argument("--reward", default="speedup",
                    help="the reward of every run, pre-training and fine-tuning (pre-training's "
                         "default: speedup over each graph's best single device)")
    ap.add_argument("--entropy-coeff", type=float, default=None,
                    help="entropy bonus of every run (default: train's)")
    ap.add_argument("--out", default="")
    ap.add_argument("--finetune-memory-penalty", default="repair",
                    help="memory_penalty of the fine-tuning runs, pre-trained and from scratch "
                         "(repair, train's default: placements the profile says overflow are "
                         "repaired, not measured; graded: measured and penalised)")
    ap.add_argument("--finetune-set", action="append", default=[], metavar="FIELD=VALUE",
                    help="a train setting of the fine-tuning runs, pre-trained and from scratch "
                         "(e.g. lr=3e-4, num_epochs=1); repeatable")
    ap.add_argument("--pretrain-set", action="append", default=[], metavar="FIELD=VALUE",
                    help="a train setting of pre-training only (e.g. incumbent_prior=2: HSDAG "
                         "pre-trained sampling around each graph's incumbent, which fine-tuning "
                         "then adopts from the checkpoint); repeatable")
    ap.add_argument("--init-soften", type=float, default=1.0, metavar="F",
                    help="below 1, also fine-tune from the pre-trained policy spread once after "
                         "loading (train --init-soften F), a third run per graph and seed")
    ap.add_argument("--reuse", action="store_true",
                    help="use the pre-trained policy already in --out (<family>-<method>-pretrain) "
                         "instead of pre-training again, and read the fine-tuning runs already "
                         "finished in --out/runs instead of running them again")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="bench_transfer_")).resolve()
    base = {"hidden_dim": args.hidden_dim, "relative_features": args.relative_features,
            "reward": args.reward}
    if args.entropy_coeff is not None:
        base["entropy_coeff"] = args.entropy_coeff
    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.pretraining import PRETRAIN_DEFAULTS, default_budget, pretrain

    finetune_settings = parse_settings(args.finetune_set)
    pretrain_settings = parse_settings(args.pretrain_set)
    if args.finetune_graphs:
        print(f"fine-tuning runs: memory_penalty {args.finetune_memory_penalty}"
              + "".join(f", {k} {v}" for k, v in finetune_settings.items()), flush=True)
    # a folder per accelerator besides the default's, so both can share one --out
    tag = "" if args.accelerator == "GPU_PARTMEM" else f"-{args.accelerator}"
    runs_dir = out / f"runs{tag}"
    all_rows: dict[str, list[dict]] = {}
    tunes: dict[str, list[tuple[str, int, dict]]] = {}
    for method in args.methods.split(","):
        t0 = time.time()
        pre = out / f"{args.family}{tag}-{method}-pretrain"
        if args.reuse and (pre / "pretrained.pt").is_file():
            meta = json.loads((pre / "pretrained.json").read_text())
            print(f"{method}: reusing the pre-trained policy in {pre}", flush=True)
        else:
            budget = args.pretrain_budget
            if budget is None:  # the method's own after imitation (Placeto: none), else 3000
                budget = default_budget(method, args.imitate_steps, fallback=3000)
            meta = pretrain(TrainConfig.of(**{**PRETRAIN_DEFAULTS, **base, **pretrain_settings},
                                        method=method, budget=budget,
                                        wandb="disabled", seed=args.pretrain_seed), args.family, pre,
                            say=lambda s: print(s, flush=True), imitate_steps=args.imitate_steps,
                            accelerator=args.accelerator)
            print(f"{method}: pre-trained {meta['placements']} placements in {time.time() - t0:.0f} s",
                  flush=True)
        rows = zero_shot_rows(method, pre, args.family, base, accelerator=args.accelerator,
                              graphs=[g for g in args.graphs.split(",") if g])
        all_rows[method] = rows
        how = (f"{args.imitate_steps} imitation steps + " if args.imitate_steps else "") + \
            f"{meta['placements']} placements"
        print(f"\n### Zero-shot, {method} pre-trained on {args.family} ({how})\n")
        print(f"| {'named' if args.graphs else 'held-out'} graph | nodes | greedy (1) | best of 10 | unrepaired greedy / best of 10 "
              "| random (1) | random best of 10 | best single device |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            star = "" if r["proven"] else "*"
            print(f"| {r['graph']}{star} | {r['nodes']} | {r['zero_shot_1']:.3f} | {r['zero_shot_10']:.3f} "
                  f"| {r['unrepaired_1']:.3f} / {r['unrepaired_10']:.3f} "
                  f"| {r['random_1']:.3f} | {r['random_10']:.3f} | {r['best_single']:.3f} |", flush=True)
        tunes[method] = []
        if args.finetune_graphs:
            import ray

            from hsdag_ray.run.local_ray import start_local_ray

            start_local_ray(log_to_driver=False, configure_logging=False, num_cpus=1)
            try:
                for r in rows[: args.finetune_graphs]:
                    for seed in (int(s) for s in args.seeds.split(",")):
                        res = finetune(method, pre, r, base, args.finetune_budget, runs_dir, seed,
                                       args.finetune_memory_penalty, finetune_settings,
                                       args.init_soften, args.reuse, args.accelerator)
                        tunes[method].append((r["graph"], seed, res))
                        print(f"{method} {r['graph']} seed {seed}: {res}", flush=True)
            finally:
                ray.shutdown()
    if any(tunes.values()):
        B = args.finetune_budget
        print(f"\n### Fine-tuning: measured placements to reach 1.05x / 1.01x of the optimum "
              f"(budget {B})\n")
        soft = args.init_soften < 1
        kinds = (["softened"] if soft else []) + ["pretrained", "scratch"]
        names = {"softened": f"pre-trained, soften {args.init_soften:g}", "pretrained": "pre-trained",
                 "scratch": "scratch"}
        print("| method | held-out graph | seed | "
              + " | ".join(f"{names[k]} {x}" for x in ("1.05x", "1.01x") for k in kinds) + " |")
        print("|---|---|---|" + "---|" * (2 * len(kinds)))
        for method, items in tunes.items():
            for graph, seed, res in items:
                print(f"| {method} | {graph} | {seed} | "
                      + " | ".join(fmt(res[k][i], B) for i in (0, 1) for k in kinds) + " |")
    (out / f"bench_transfer{tag}.json").write_text(json.dumps(
        {"zero_shot": {m: [{k: v for k, v in r.items() if k != "profile"} for r in rows]
                       for m, rows in all_rows.items()}, "finetune": {m: [(g, s, r) for g, s, r in v] for m, v in tunes.items()}},
        indent=1, default=str))
    print(f"\noutputs in {out}")


if __name__ == "__main__":
    main()
