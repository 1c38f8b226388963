"""What the single devices a run measures first teach refit's model: the machine's latency of
the exact optimum of the run's profile, and of refit's model after the single devices
(the posterior mean), with and without a factor shared by each device's times
(``LatencyModel``'s ``device_scale``), each divided by the machine's optimum.

    python bench/bench_first_model.py --models hf:roformer,hf:camembert --limit 20

The problems are ``bench_first_ten.py``'s (the recorded profile is the machine, the run's
profile a variant of it 50% off, ``--estimate``); every solve is the sequential MILP with
``--limit`` seconds, and a ratio marked ``?`` comes from a solve stopped at the limit.
"""
from __future__ import annotations

import argparse

import numpy as np

from bench.bench_first_ten import problems


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="hf:roformer,hf:camembert,hf:layoutlm,tv:regnet_y_800mf")
    ap.add_argument("--accelerators",
                    default="GPU_SMALLMEM+NPU_MODEL,GPU_SMALLMEM+GPU_TINYMEM+NPU_MODEL")
    ap.add_argument("--scales", default="0,0.2,0.5", help="device_scale values of the model")
    ap.add_argument("--limit", type=float, default=20.0, help="seconds per MILP solve")
    ap.add_argument("--estimate", type=float, default=0.5, help="how far off the run's profile is")
    ap.add_argument("--profiles", default="bench/.cache", help="folder of recorded profiles")
    args = ap.parse_args()
    from envs.latency_model import LatencyModel
    from envs.simulator import Simulator
    from policies.solvers.milp_sequential import solve_milp_sequential

    scales = [float(s) for s in args.scales.split(",")]
    print("| model | devices | machine's optimum | profile's optimum | "
          + " | ".join(f"after the singles, scale {s:g}" for s in scales) + " |")
    print("|---|---|---|---|" + "---|" * len(scales))
    for model, _, devices, _, machine_cg, profile_cg in problems(
            args.models, args.accelerators, args.profiles, args.estimate):
        machine = Simulator(machine_cg)
        best = solve_milp_sequential(machine_cg, time_limit=args.limit)
        optimum = best.value

        def ratio(costs) -> str:
            r = solve_milp_sequential(costs, time_limit=args.limit)
            return f"{machine.sequential(np.asarray(r.placement)).value / optimum:.4f}" \
                   + ("" if r.optimal else "?")

        cells = [ratio(profile_cg)]
        for scale in scales:
            m = LatencyModel(profile_cg, device_scale=scale)
            for d in range(len(devices)):
                p = np.full(profile_cg.num_nodes, d)
                m.add(p, machine.sequential(p).value)
            cells.append(ratio(m.refitted(m.posterior_mean())))
        print(f"| {model} | {len(devices)} | {optimum:.4f} s{'' if best.optimal else '?'} | "
              + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
