"""How close the repaired start is to the optimum, and what a repair costs.

    python bench/bench_repair.py                                    # six models, three profiles
    python bench/bench_repair.py --models tv:swin_t,hf:gpt2 --profiles prof/ --accelerator GPU_SMALLMEM

For each model and profile (the one recorded here, and its ``--jitter`` copies,
as ``bench_learning.py`` makes them, in the same ``--profiles`` folder): the
start a run samples around before anything is measured
(:func:`envs.incumbent.start_placement`: each single device repaired to fit
memory by :func:`hsdag_core.fit.repair`, the one the profile estimates
fastest) over the exact optimum (MILP with the memory limit), and the mean
time of one repair over random overflowing placements. Prints a markdown table.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from bench.bench_learning import load_or_record
from envs.incumbent import start_placement
from envs.simulator import Simulator
from hsdag_core.coarsening import build_graph
from hsdag_core.fit import feasible, repair
from hsdag_core.device_profile import Profile, cost_graph
from policies.solvers.exact import solve

MODELS = "resnet50,bert_base,hf:gpt2,tv:efficientnet_v2_s,tv:swin_t,hf:bart"


def repair_ms(cg, samples: int = 20, seed: int = 0) -> float:
    """Mean milliseconds of one repair over random overflowing placements."""
    rng = np.random.default_rng(seed)
    props = [(rng.random(cg.num_nodes) < q).astype(np.int64) for q in np.linspace(0.5, 0.99, samples)]
    props = [p for p in props if not feasible(cg, p)]
    if not props:
        return float("nan")
    t = time.perf_counter()
    for p in props:
        repair(cg, p)
    return 1e3 * (time.perf_counter() - t) / len(props)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--accelerator", default="GPU_SMALLMEM")
    ap.add_argument("--profiles", default="bench/.cache", help="folder shared with bench_learning.py")
    ap.add_argument("--jitters", default=",0.3:1,0.3:2",
                    help="profile variants: empty = as recorded, SIGMA:SEED = bench_learning's --jitter")
    args = ap.parse_args()
    folder = Path(args.profiles)
    folder.mkdir(parents=True, exist_ok=True)
    print("| model | profile | start / optimum | repair, ms |\n|---|---|---|---|")
    for model in args.models.split(","):
        _, _, coarse, _ = build_graph(model, "colocation")
        for jitter in args.jitters.split(","):
            cg = cost_graph(coarse, Profile.load(load_or_record(model, folder, jitter)),
                            ["CPU", args.accelerator])
            sim = Simulator(cg)
            start = start_placement(cg.num_nodes, cg.devices, {}, cg)
            optimum = solve(cg, "sequential", "milp", time_limit=60).value
            print(f"| {model} | {jitter or 'recorded'} | {sim.sequential(start).value / optimum:.4f} "
                  f"| {repair_ms(cg):.1f} |", flush=True)


if __name__ == "__main__":
    main()
