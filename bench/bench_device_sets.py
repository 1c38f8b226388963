r"""Placing on device sets never seen in training: one policy, devices as inputs.

    python bench/bench_device_sets.py --quick                         # a minute: checks it runs
    python bench/bench_device_sets.py --out devsets-synthetic         # synthetic family
    python bench/bench_device_sets.py --family real --held-out-sets 4 --out devsets \
        --held-out-graphs resnet50,tv:convnext_tiny,hf:distilbert,tv:googlenet   # docs/results/device-sets.md
    python bench/bench_device_sets.py --family real --held-out-split wide --held-out-sets 8 \
        --weights devsets/device_gdp.pt --skip refit --out devsets-wide          # outside the training ranges

One :class:`~policies.gdp.device_net.DeviceGDPNet` (GDP's encoder, devices read as
feature vectors, a score per (node, device) pair) is pre-trained on the training
graphs of ``--family`` (:mod:`hsdag_core.families`), each paired with
``--sets-per-graph`` training device sets of two to four modeled devices
(:mod:`hsdag_core.device_sets`: a CPU-like host and GPU-, NPU- or CPU-like
accelerators of varied speed, some GPUs holding only part of the weights): first
``--imitate-steps`` steps of imitation of the best solver placement
(:func:`policies.gdp.device_training.imitate`), then ``--rl-steps`` REINFORCE steps
on the simulator. Then every held-out graph is placed on every held-out device set
(seeds the training sets never use), sequential objective, as:

* **zero-shot**: the pre-trained policy's greedy placement, repaired to the memory;
* **fine-tuned**: ``--budget`` measured placements from the pre-trained weights (the
  greedy placement first, then REINFORCE);
* **from scratch**: the same network and REINFORCE, fresh weights, same budget;
* **refit** and **random** search (:func:`hsdag_ray.run.inprocess.run_method`), same budget;
* **per-node**: every node on its own fastest device, repaired (no learning: the rule
  the pair features make easiest to learn);
* the **fastest single device** that fits, and the **reference**: the best of the
  MILP (``--solver-limit`` seconds, its proven gap reported), alpha-expansion and
  Baechi's m-ETF.

Every method measures on the simulator, every proposal repaired to the devices'
memory first, the fastest single device known before a run starts; refit and the
solvers read the cost model (here it is the ground truth), the learned runs read
it only as their features. Figures are the latency over the reference (1.000 =
as good; geometric means over problems and ``--seeds``), overall and per set size,
and the mean wall time of a run with a budget (learning or searching and measuring:
here the simulator measures in microseconds, so it is the method's own time).
Writes ``results.json`` and ``results.md`` to ``--out`` (and the pre-trained weights,
``device_gdp.pt``, which ``--reuse`` loads instead of training again).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

QUICK = dict(family="tiny", train_sets=4, sets_per_graph=2, held_out_sets=2, imitate_steps=40,
             rl_steps=10, budget=12, seeds="0", solver_limit=2.0, hidden_dim=32)
METHODS = ("zero-shot", "fine-tuned", "scratch", "refit", "random", "per-node", "single")


def _graphs(specs, coarsen: str = "colocation"):
    from hsdag_core.coarsening import build_graph

    return [build_graph(s, coarsen)[2] for s in specs]


def problems(graphs, sets, pairs, limit: float, say, boundary_s: float = 1e-4) -> list:
    """One :class:`Problem` per (graph index, set index) of ``pairs``."""
    from policies.gdp.device_training import make_problem

    out = []
    for gi, si in pairs:
        t0 = time.perf_counter()
        out.append(make_problem(graphs[gi], sets[si], limit, boundary_s))
        p = out[-1]
        say(f"  {graphs[gi].name} on {sets[si].name}: single {p.best_single_s * 1e3:.3f} ms, "
            f"reference {p.teacher_s * 1e3:.3f} ms ({p.teacher_info.get('teacher')}, "
            f"{time.perf_counter() - t0:.1f} s)")
    return out


def pretrain(train, args, say):
    from policies.gdp.device_net import DeviceGDPNet
    from policies.gdp.device_training import imitate, reinforce
    from policies.gdp.policy import GDPConfig

    torch.manual_seed(args.pretrain_seed)
    net = DeviceGDPNet(train[0].x.shape[1], GDPConfig(hidden_dim=args.hidden_dim))
    t0 = time.perf_counter()
    imitate(net, train, args.imitate_steps, seed=args.pretrain_seed, say=say)
    reinforce(net, train, args.rl_steps, seed=args.pretrain_seed, say=say)
    return net, time.perf_counter() - t0


#: the runs with a budget, measured per seed
BUDGETED = ("fine-tuned", "scratch", "refit", "random")


def evaluate(net, p, graph, args, seeds) -> dict:
    """Every method's latency on problem ``p`` of ``graph`` (module docstring); a run of
    ``--skip`` is left out (an empty list, and no wall time)."""
    from envs.simulator import SimulatorBackend
    from hsdag_ray.run.inprocess import run_method
    from policies.gdp.device_net import DeviceGDPNet
    from policies.gdp.device_training import fastest_per_node, finetune, zero_shot
    from policies.gdp.policy import GDPConfig

    def scratch(seed: int) -> float:
        torch.manual_seed(1000 + seed)
        fresh = DeviceGDPNet(p.x.shape[1], GDPConfig(hidden_dim=args.hidden_dim))
        return finetune(fresh, p, args.budget, seed=seed, greedy_first=False)["latency_s"]

    def search(method: str, seed: int) -> float:
        res = run_method(method, graph, SimulatorBackend(p.costs), p.costs, budget=args.budget,
                         seed=seed, say=lambda s: None, progress=False)
        return float(min(res["latency_s"], p.best_single_s))

    runs = {"fine-tuned": lambda seed: finetune(net, p, args.budget, seed=seed)["latency_s"],
            "scratch": scratch, "refit": lambda seed: search("refit", seed),
            "random": lambda seed: search("random", seed)}
    skip = {m for m in args.skip.split(",") if m}
    p.forget()
    row = {"graph": p.graph, "set": p.device_set, "size": p.size, "reference_s": p.teacher_s,
           "single": p.best_single_s, **p.teacher_info, "wall_s": {}}
    row["zero-shot"] = zero_shot(net, p)[1]
    row["per-node"] = fastest_per_node(p)[1]
    for name in BUDGETED:
        row[name] = []
        if name in skip:
            continue
        t0 = time.perf_counter()
        row[name] = [runs[name](seed) for seed in seeds]
        row["wall_s"][name] = (time.perf_counter() - t0) / len(seeds)
    p.forget()
    return row


def _ratio(row, method) -> float:
    """``method``'s latency over the reference (geometric mean over seeds), nan if not run."""
    v = row[method]
    if isinstance(v, list) and not v:
        return float("nan")
    v = float(np.exp(np.mean(np.log(v)))) if isinstance(v, list) else float(v)
    return v / row["reference_s"]


def table(rows) -> str:
    """Markdown: geometric mean latency over the reference, per set size and overall."""
    groups = sorted({r["size"] for r in rows})
    head = "| devices | problems | " + " | ".join(METHODS) + " |"
    lines = [head, "|" + "---|" * (len(METHODS) + 2)]
    for size in groups + ["all"]:
        sel = [r for r in rows if size == "all" or r["size"] == size]
        cells = []
        for m in METHODS:
            g = np.exp(np.mean([np.log(_ratio(r, m)) for r in sel]))
            cells.append("n/a" if np.isnan(g) else f"{g:.3f}")
        lines.append(f"| {size} | {len(sel)} | " + " | ".join(cells) + " |")
    walls = [r["wall_s"] for r in rows]
    if walls:
        lines.append("| wall s per run | | | " + " | ".join(
            f"{np.mean([w[m] for w in walls]):.1f}" if m in walls[0] else "" for m in METHODS[1:]) + " |")
    wins = {m: sum(_ratio(r, m) <= np.nanmin([_ratio(r, o) for o in METHODS]) + 1e-9 for r in rows)
            for m in METHODS}
    lines.append("")
    lines.append("Best (ties count for each): " + ", ".join(f"{m} {wins[m]}" for m in METHODS))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", default="synthetic", help="graph family (hsdag_core.families)")
    ap.add_argument("--held-out-graphs", default="", metavar="SPECS",
                    help="comma-separated model specs placed instead of the family's held-out graphs")
    ap.add_argument("--train-sets", type=int, default=24, help="training device sets")
    ap.add_argument("--sets-per-graph", type=int, default=4, help="training sets each training graph meets")
    ap.add_argument("--held-out-sets", type=int, default=6, help="held-out device sets")
    ap.add_argument("--held-out-split", default="held_out", choices=("held_out", "wide"),
                    help="held_out: the training ranges of speed and memory; wide: outside them")
    ap.add_argument("--held-out-boundary-ms", type=float, default=0.1,
                    help="stage boundary cost of the held-out problems (training: 0.1 ms)")
    ap.add_argument("--skip", default="", metavar="METHODS",
                    help="comma-separated runs with a budget to leave out (e.g. refit: minutes per "
                         "problem on four devices); their columns read n/a")
    ap.add_argument("--weights", default="", help="pre-trained device_gdp.pt to load (no pre-training)")
    ap.add_argument("--imitate-steps", type=int, default=600)
    ap.add_argument("--rl-steps", type=int, default=300)
    ap.add_argument("--budget", type=int, default=50, help="measured placements per run")
    ap.add_argument("--seeds", default="0,1", help="seeds of the runs with a budget")
    ap.add_argument("--pretrain-seed", type=int, default=0)
    ap.add_argument("--solver-limit", type=float, default=10.0, help="MILP seconds per problem")
    ap.add_argument("--hidden-dim", type=int, default=64)
    ap.add_argument("--quick", action="store_true", help="tiny family, few steps: checks the pipeline")
    ap.add_argument("--reuse", action="store_true", help="load device_gdp.pt from --out")
    ap.add_argument("--out", default="", help="folder for results.json, results.md, device_gdp.pt")
    args = ap.parse_args(argv)
    if args.quick:
        for k, v in QUICK.items():
            setattr(args, k, v)
    from hsdag_core.device_sets import device_sets
    from hsdag_core.families import get_family

    torch.set_num_threads(1)
    say = lambda s: print(s, flush=True)  # noqa: E731
    fam = get_family(args.family)
    seeds = [int(s) for s in args.seeds.split(",") if s]
    out = Path(args.out) if args.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    train_sets = device_sets("train", args.train_sets)
    held_sets = device_sets(args.held_out_split, args.held_out_sets)
    held_specs = [s for s in args.held_out_graphs.split(",") if s] or [g.spec for g in fam.held_out]
    say(f"building {len(fam.train)} training and {len(held_specs)} held-out graphs")
    train_graphs, held_graphs = _graphs([g.spec for g in fam.train]), _graphs(held_specs)
    weights = out / "device_gdp.pt" if out else None
    t_pre = 0.0
    if args.weights or (args.reuse and weights and weights.exists()):
        path = Path(args.weights) if args.weights else weights
        net = torch.load(path, weights_only=False)
        say(f"loaded {path}")
    else:
        pairs = [(g, (g * args.sets_per_graph + k) % len(train_sets))
                 for g in range(len(train_graphs)) for k in range(args.sets_per_graph)]
        say(f"training problems: {len(pairs)} (graph, device set) pairs")
        train = problems(train_graphs, train_sets, pairs, args.solver_limit, say)
        net, t_pre = pretrain(train, args, say)
        say(f"pre-trained in {t_pre:.0f} s")
        if weights:
            torch.save(net, weights)
    rows = []
    held_pairs = [(g, s) for g in range(len(held_graphs)) for s in range(len(held_sets))]
    say(f"held-out problems: {len(held_pairs)}")
    held = problems(held_graphs, held_sets, held_pairs, args.solver_limit, say,
                    args.held_out_boundary_ms * 1e-3)
    for (gi, _), p in zip(held_pairs, held):
        t0 = time.perf_counter()
        rows.append(evaluate(net, p, held_graphs[gi], args, seeds))
        r = rows[-1]
        say(f"  {p.graph} on {p.device_set}: " + ", ".join(f"{m} {_ratio(r, m):.3f}" for m in METHODS)
            + f" ({time.perf_counter() - t0:.0f} s)")
    md = table(rows)
    print(md)
    if out:
        settings = {k: v for k, v in vars(args).items()}
        (out / "results.json").write_text(json.dumps({"settings": settings, "pretrain_s": t_pre,
                                                      "rows": rows}, indent=1, default=float))
        (out / "results.md").write_text(md + "\n")
        say(f"wrote {out / 'results.md'}")
    return 0


if __name__ == "__main__":
    from hsdag_ray.cli import run

    raise SystemExit(run(main, prog="bench_device_sets"))
