"""Time to evaluate one placement with the simulator, per objective.

    python bench/bench_simulator.py            # bert_base (modeled profile) and 50k nodes
    python bench/bench_simulator.py --nodes 5000

Targets on a 2-core machine: <= 1 ms for bert_base and <= 100 ms for a
50,000-node DAG with the sequential objective.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from envs.simulator import OBJECTIVES, Simulator
from hsdag_core.synthetic import random_cost_graph


def time_eval(sim: Simulator, objective: str, reps: int, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    ps = [rng.integers(0, sim.graph.num_devices, sim.graph.num_nodes) for _ in range(reps)]
    sim.evaluate(ps[0], objective)  # warm-up
    t0 = time.perf_counter()
    for p in ps:
        sim.evaluate(p, objective)
    return (time.perf_counter() - t0) / reps


def bert_cost_graph():
    from hsdag_core.coarsening import build_graph
    from hsdag_core.device_profile import Profile, add_modeled_device, cost_graph

    _, fine, _, _ = build_graph("bert_base", "none")
    prof = Profile("bert_base", {}, {})
    add_modeled_device(prof, fine, "CPU_MODEL")
    add_modeled_device(prof, fine, "GPU_MODEL")
    return cost_graph(fine, prof)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=50_000, help="size of the synthetic DAG")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    cases = [("bert_base", bert_cost_graph(), 1e-3),
             (f"synthetic {args.nodes}", random_cost_graph(args.nodes), 100e-3)]
    print(f"{'graph':<18}{'nodes':>7}{'edges':>8}  " + "".join(f"{o:>14}" for o in OBJECTIVES)
          + "   target(sequential)")
    for label, g, target in cases:
        sim = Simulator(g)
        reps = args.reps if g.num_nodes < 10_000 else max(3, args.reps // 4)
        times = [time_eval(sim, o, reps if o != "parallel" else max(3, reps // 4)) for o in OBJECTIVES]
        ok = "met" if times[0] <= target else "MISSED"
        print(f"{label:<18}{g.num_nodes:>7}{len(g.edge_src):>8}  "
              + "".join(f"{t * 1e3:>11.3f} ms" for t in times)
              + f"   {target * 1e3:g} ms {ok} ({times[0] / target:.2f} of target)")


if __name__ == "__main__":
    main()
