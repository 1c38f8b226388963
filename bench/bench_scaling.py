"""Measurements per second against the number of measuring machines, and the scaling efficiency.

    python bench/bench_scaling.py                          # 1, 2, 4 raylets, 0.25 s per measurement, ResNet-50
    python bench/bench_scaling.py --nodes 1,2,4,8 --delay 0.5 --iterations 6

Each measuring machine is a raylet of a ``ray.cluster_utils.Cluster`` on this
machine with one ``measure_slot`` (the head has none), and every measurement
takes a fixed ``--delay`` seconds (the simulator with ``sim_delay_s``, pinned
like a real backend), so the figure is what Ray and the training loop make of
the machines, not how fast this machine computes. HSDAG trains with one
EnvRunner per machine and one episode per EnvRunner per iteration. The rate
is the median, over the run's iterations after the first (the first builds
the EnvRunners), of an iteration's new measurements over its wall time; the
efficiency at ``k`` machines is
``rate(k) / (k * rate(1))``. Target: at least 0.9 at 4 machines.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path


def one(nodes: int, args, out: Path) -> dict:
    import ray
    from ray.cluster_utils import Cluster

    from hsdag_ray.run.config import MEASURE_RESOURCE, TrainConfig
    from hsdag_ray.run.training import train

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    for _ in range(nodes):
        cluster.add_node(num_cpus=1, resources={MEASURE_RESOURCE: 1})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        cfg = TrainConfig.of(model=args.model, backend="simulator", sim_delay_s=args.delay,
                          episode_len=args.episode_len, episodes_per_iteration=nodes,
                          env_runners=nodes, budget=nodes * args.episode_len * args.iterations,
                          wandb="disabled", remeasure_rounds=1, checkpoint_every=1000,
                          out=str(out), name=f"nodes{nodes}")
        t0 = time.time()
        s = train(cfg, quiet=True)
        rows = [json.loads(x) for x in (out / cfg.run.name / "metrics.jsonl").read_text().splitlines()]
    finally:
        ray.shutdown()
        cluster.shutdown()
    first, last = rows[0], rows[-1]
    measured = last["measurements"] - first["measurements"]
    seconds = last["wall_s"] - first["wall_s"]
    # the median iteration: one stall of a shared machine does not make the figure
    rate = statistics.median(r["measurements_per_s"] for r in rows[1:])
    return {"nodes": nodes, "rate": rate, "measured": measured, "seconds": seconds,
            "hits": last["cache_hits"], "total_s": time.time() - t0,
            "ideal": nodes / args.delay, "iterations": s["iterations"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="1,2,4", help="measuring machines, comma-separated")
    ap.add_argument("--delay", type=float, default=0.25, help="seconds per measurement")
    ap.add_argument("--episode-len", type=int, default=10)
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--model", default="resnet50",
                    help="a model with enough nodes that few placements repeat (cache hits)")
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in (int(x) for x in args.nodes.split(",")):
            r = one(k, args, Path(tmp))
            results.append(r)
            print(f"{k} machine(s): {r['rate']:.2f} measurements/s (median iteration; {r['measured']} "
                  f"in {r['seconds']:.1f} s over the iterations; ideal {r['ideal']:.2f}/s; {r['hits']} cache hits; "
                  f"whole run {r['total_s']:.0f} s)", flush=True)
    base = results[0]["rate"] / results[0]["nodes"]
    print(f"\n{args.delay:g} s per measurement, {args.episode_len} per episode, model {args.model}\n")
    print("| measuring machines | measurements/s | of ideal | scaling efficiency |")
    print("|---|---|---|---|")
    for r in results:
        print(f"| {r['nodes']} | {r['rate']:.2f} | {r['rate'] / r['ideal']:.2f} "
              f"| {r['rate'] / (r['nodes'] * base):.2f} |")


if __name__ == "__main__":
    main()
