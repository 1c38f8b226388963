"""How the learned methods scale to large graphs: forward and update time and peak memory.

    python bench/bench_scale.py                          # 50,000 nodes, gdp and hsdag
    python bench/bench_scale.py --nodes 3000,50000 --methods gdp --json

A synthetic DAG (:func:`hsdag_core.synthetic.random_cost_graph`: long and
narrow with skip connections, like a deep network's graph) of ``--nodes``
nodes and two devices is given to each method's RLModule as the padded
placement observation every environment produces. Each (method, size) runs in
a fresh subprocess, so its peak resident memory (``ru_maxrss``, the process's
whole footprint including torch) is its own. Figures:

* ``forward_s``: one placement sampled (inference with exploration), what an
  EnvRunner does per step;
* ``update_s``: one gradient step of the method's learner on one
  iteration's batch of ``--steps`` placements of the graph (HSDAG: REINFORCE
  on an episode of ``--steps`` steps, back-propagated through its node-state
  recurrence; GDP: PPO's clipped surrogate, value and entropy losses on a
  minibatch of ``--steps`` one-shot placements; PPO runs ``num_epochs`` = 4 of
  these per iteration);
* ``update_warm_s``: the same update once more, as every update after a
  learner's first costs (the first also pays the kernel for fresh memory pages);
* ``peak_rss_gb``: the subprocess's peak memory after all of them.

Each time is given as wall time and as the process's CPU time (``--threads``
torch threads, 1 by default): on a shared machine the CPU time is what the
method costs, the wall time what it cost while sharing the cores.

HSDAG's update batch carries each step's sampled grouping (the stored action
distribution inputs) and gate edges, as a learner's batch does, so the learner
re-uses them rather than parsing the grouping again; ``--parse-grouping`` leaves
both out (every step parses afresh), ``--parse-gates`` the gate edges only.

HSDAG's learner embeds each graph once per episode, its GCN layers share one
normalised sparse adjacency, graph parsing keeps no per-edge activations for
backward, and each sample keeps its gate edges so the learner scores only
those. What each of these choices changed, and what a second torch thread does on a shared
machine, is in docs/results/scale.md.

The goal for 50,000 nodes is at most 2 s and 8 GB per update on a 2-core
machine. A method that misses it is reported as it is (``timeout`` when it
takes longer than ``--timeout`` seconds).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np

METHODS = ("gdp", "hsdag")


def _features(cg) -> np.ndarray:
    """Per-node features from the cost graph: log compute times, log output size,
    in/out degree, topological position (the kinds the environments use)."""
    n = cg.num_nodes
    indeg = np.bincount(cg.edge_dst, minlength=n)
    outdeg = np.bincount(cg.edge_src, minlength=n)
    return np.column_stack([np.log(cg.compute_s), np.log(cg.tensor_bytes), indeg, outdeg,
                            np.arange(n) / n]).astype(np.float32)


def _max_rss_gb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB


def measure(method: str, nodes: int, steps: int, seed: int = 0, threads: int = 1,
            stored: bool = True, gates: bool = True, alternate: int = 0) -> dict:
    """Forward and update time and peak memory of ``method`` on a ``nodes``-node graph,
    in this process (call it in a fresh one for a meaningful ``peak_rss_gb``). With
    ``alternate`` = K (HSDAG), K more updates without and K with the stored gate edges,
    alternated, give ``alternate_cpu_s``: the median CPU time of each."""

    import torch
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from envs.observation import pad_graph_observation, placement_spaces
    from hsdag_ray.run.config import TrainConfig
    from hsdag_core.synthetic import random_cost_graph
    from policies.hsdag.module import GATE_PARTNER
    from policies.registry import get, load

    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    spec_m = get(method)
    cg = random_cost_graph(nodes, devices=2, seed=seed)
    edge_index = np.stack([cg.edge_src, cg.edge_dst])
    x = _features(cg)
    obs_space, act_space = placement_spaces(nodes, edge_index.shape[1], x.shape[1], 2)
    obs = {k: torch.as_tensor(v) for k, v in
           pad_graph_observation(x, edge_index, nodes, edge_index.shape[1]).items()}
    from hsdag_ray.run.resolve import resolved

    settings = resolved(TrainConfig.of(episode_len=steps))
    module = RLModuleSpec(module_class=load(spec_m.module), observation_space=obs_space,
                          action_space=act_space,
                          model_config=spec_m.model_config(settings)).build()
    opt = torch.optim.Adam(module.parameters(), lr=1e-3)
    stateful = module.is_stateful()
    state0 = {k: torch.as_tensor(v)[None] for k, v in module.get_initial_state().items()}
    rss_built = _max_rss_gb()

    # forward: one sampled placement, as an EnvRunner
    one = {Columns.OBS: {k: v[None] for k, v in obs.items()}}
    if stateful:
        one[Columns.STATE_IN] = state0
    t0, c0 = time.perf_counter(), time.process_time()
    with torch.no_grad():
        out = module.forward_exploration(one)
        action = module.action_dist_cls.from_logits(out[Columns.ACTION_DIST_INPUTS]).sample()
    forward_s, forward_cpu_s = time.perf_counter() - t0, time.process_time() - c0

    # update: the learner's batch of `steps` placements, one gradient step
    actions = action.expand(steps, -1)
    adv = torch.randn(steps)

    def update(gates: bool = gates) -> tuple:
        t0, c0 = time.perf_counter(), time.process_time()
        if stateful:  # one episode of `steps` steps with the recurrent node state
            batch = {Columns.OBS: {k: v[None, None].expand(1, steps, *v.shape) for k, v in obs.items()},
                     Columns.STATE_IN: state0}
            if stored:  # as a learner's batch: the sampled grouping travels with each step
                inputs = out[Columns.ACTION_DIST_INPUTS]
                batch[Columns.ACTION_DIST_INPUTS] = inputs[:, None].expand(1, steps, *inputs.shape[1:])
                if gates and GATE_PARTNER in out:  # and each node's gate edge
                    batch[GATE_PARTNER] = out[GATE_PARTNER][:, None].expand(1, steps, nodes)
            fwd = module.forward_train(batch)
            dist = module.action_dist_cls.from_logits(fwd[Columns.ACTION_DIST_INPUTS][0])
            loss = -(dist.logp(actions) * adv).mean() - 0.01 * dist.entropy().mean()
        else:  # PPO: clipped surrogate + value + entropy on a minibatch of one-shot placements
            batch = {Columns.OBS: {k: v[None].expand(steps, *v.shape) for k, v in obs.items()}}
            fwd = module.forward_train(batch)
            dist = module.action_dist_cls.from_logits(fwd[Columns.ACTION_DIST_INPUTS])
            logp = dist.logp(actions)
            ratio = torch.exp(logp - logp.detach())
            surrogate = torch.min(ratio * adv, ratio.clamp(0.7, 1.3) * adv)
            values = module.compute_values(batch, fwd[Columns.EMBEDDINGS])
            loss = (-surrogate.mean() + ((values - adv) ** 2).mean() - 0.01 * dist.entropy().mean())
        opt.zero_grad()
        loss.backward()
        opt.step()
        return time.perf_counter() - t0, time.process_time() - c0, loss

    update_s, update_cpu_s, loss = update()  # the first: also pays for fresh memory pages
    grad_norm = float(torch.cat([p.grad.reshape(-1) for p in module.parameters() if p.grad is not None]).norm())
    warm_s, warm_cpu_s, _ = update()  # what every later update of a learner costs
    alternated = {}
    if alternate and stateful and stored:
        times = {"parse_gates": [], "stored_gates": []}
        for _ in range(alternate):
            times["parse_gates"].append(update(gates=False)[1])
            times["stored_gates"].append(update(gates=True)[1])
        alternated = {"alternate_cpu_s": {k: float(np.median(v)) for k, v in times.items()}}
    return {"method": method, "nodes": nodes, "edges": int(edge_index.shape[1]), "steps": steps,
            "threads": threads, "stored_grouping": bool(stored and stateful),
            "stored_gates": bool(stored and gates and stateful),
            "forward_s": forward_s, "update_s": update_s,
            "forward_cpu_s": forward_cpu_s, "update_cpu_s": update_cpu_s,
            "update_warm_s": warm_s, "update_warm_cpu_s": warm_cpu_s, "built_rss_gb": rss_built,
            "peak_rss_gb": _max_rss_gb(), "params": sum(p.numel() for p in module.parameters()),
            "loss": float(loss), "grad_norm": grad_norm, **alternated}


def run_isolated(method: str, nodes: int, steps: int, timeout: float, threads: int = 1,
                 stored: bool = True, gates: bool = True, alternate: int = 0) -> dict:
    """:func:`measure` in a fresh subprocess (``{"error": ...}`` when it fails or times out)."""
    cmd = [sys.executable, __file__, "--one", method, "--nodes", str(nodes), "--steps", str(steps),
           "--threads", str(threads)] + ([] if stored else ["--parse-grouping"]) \
        + ([] if gates else ["--parse-gates"]) + (["--alternate-gates", str(alternate)] if alternate else [])
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"method": method, "nodes": nodes, "error": f"timeout after {timeout:.0f} s"}
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        return {"method": method, "nodes": nodes, "error": tail[:300]}
    return json.loads(lines[-1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="50000", help="graph sizes, comma-separated")
    ap.add_argument("--methods", default=",".join(METHODS), help="methods, comma-separated")
    ap.add_argument("--steps", type=int, default=20, help="placements per update batch (episode_len)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per (method, size)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of each subprocess")
    ap.add_argument("--parse-grouping", action="store_true",
                    help="HSDAG's update parses every step's grouping afresh instead of re-using "
                         "the sampled one a learner's batch carries")
    ap.add_argument("--parse-gates", action="store_true",
                    help="HSDAG's update finds each node's gate edge again (scoring every edge) "
                         "instead of re-using the sampled ones a learner's batch carries")
    ap.add_argument("--alternate-gates", type=int, default=0, metavar="K",
                    help="HSDAG: then K updates without and K with the stored gate edges, "
                         "alternated in the same process; prints the median CPU time of each")
    ap.add_argument("--json", action="store_true", help="print one JSON line per case")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one, int(args.nodes), args.steps, threads=args.threads,
                                 stored=not args.parse_grouping, gates=not args.parse_gates,
                                 alternate=args.alternate_gates)), flush=True)
        return
    rows = []
    for n in (int(v) for v in args.nodes.split(",")):
        for m in args.methods.split(","):
            row = run_isolated(m, n, args.steps, args.timeout, args.threads, not args.parse_grouping,
                               not args.parse_gates, args.alternate_gates)
            rows.append(row)
            print(json.dumps(row) if args.json else f"{m} {n}: {row}", flush=True)
    if args.json:
        return
    print(f"\n| method | nodes | forward: wall / CPU (s) | first update, batch of {args.steps}: wall / CPU (s) "
          "| next update: wall / CPU (s) | peak memory (GB) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['method']} | {r['nodes']} | {r['error']} | | | |")
        else:
            print(f"| {r['method']} | {r['nodes']} | {r['forward_s']:.2f} / {r['forward_cpu_s']:.2f} | "
                  f"{r['update_s']:.2f} / {r['update_cpu_s']:.2f} | "
                  f"{r['update_warm_s']:.2f} / {r['update_warm_cpu_s']:.2f} | {r['peak_rss_gb']:.2f} |")
    for r in rows:
        alt = r.get("alternate_cpu_s")
        if alt:
            print(f"{r['method']} {r['nodes']} nodes, {r['steps']} steps, alternated "
                  f"{args.alternate_gates}x, median update CPU: gate edges found again "
                  f"{alt['parse_gates']:.2f} s, stored {alt['stored_gates']:.2f} s "
                  f"({alt['stored_gates'] / alt['parse_gates']:.2f}x)")


if __name__ == "__main__":
    main()
