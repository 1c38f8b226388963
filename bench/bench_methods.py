"""Every placement method at the same budget, as published and guided: the comparison table.

    python bench/bench_methods.py --budget 200 --budgets 50,200 --estimate 0.5 \\
        --models resnet50,inception_v3,bert_base,tv:mobilenet_v3_small,tv:regnet_y_400mf,hf:t5,hf:gpt2
    python bench/bench_methods.py --methods hsdag,anneal --guide off --seeds 0,1,2,3,4 -- --no-cost
    python bench/bench_methods.py --guide off --seeds 0 --budgets 50,200 --estimate 0.5 \
        --accelerators GPU_SMALLMEM+NPU_MODEL,GPU_SMALLMEM+GPU_TINYMEM+NPU_MODEL   # 3 and 4 devices

Simulator, sequential objective, the local CPU profiled once by OpenVINO plus a modeled
accelerator (unlimited ``GPU_MODEL`` or 64 MB ``GPU_SMALLMEM``), the same budget of
placements for every method (learned ones, the searches without learning and the
solvers), each run as published and with ``train --guide`` (the exact-solver start,
HSDAG's incumbent prior, untried neighbours of the best: the same aids for every
method). ``--estimate 0.5`` gives every method a profile whose op times are up to 50% off
what the simulator measures, as a recorded profile is off a real machine. Prints each
run, then a markdown table per budget of ``--budgets``: the median best/optimum after
that many measurements (the best after every measurement, so 10 means 10 for every
method; cached repeats are not measurements) over seeds with the range (min-max), one
column per method and guide mode, and a table of the measurements and wall seconds
(planning and solving included) until the best was within 1.01x of the optimum; ``*``
marks a case whose optimum the solver did not prove, and a list after the tables names
the solver each row divides by (s-t minimum cut on two devices, the MILP beyond) with
its proof or gap; ``--plot FILE`` draws each method's median best/optimum against
measurements and ``--json FILE`` writes every case. ``--accelerators A+B`` runs on the
CPU and several accelerators. Profiles are shared with ``bench_learning.py`` and
``bench_solvers.py`` (``--profiles``).
"""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from bench.bench_learning import REFERENCES, TARGET, best_at, parse, plot, run_grid, target_cells

from hsdag_ray.results import cell


def main() -> None:
    from policies.registry import METHODS

    args, base = parse(__doc__, ",".join(METHODS), guide_modes=True)
    methods = args.methods.split(",")
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.guide]
    columns, by_case = [], {}
    for guided in modes:
        cases = run_grid(args.models.split(","), args.accelerators.split(","), methods,
                         [int(s) for s in args.seeds.split(",")], args.budget, Path(args.profiles),
                         replace(base, guide=guided), say=lambda m: print(m, flush=True),
                         jitter=args.jitter, estimate=args.estimate)
        for c in cases:
            label = c["method"] + (" (guided)" if guided else "")
            columns += [label] if label not in columns else []
            by_case.setdefault((c["model"], c["accelerator"]), {})[label] = c
    for budget in sorted(int(b) for b in args.budgets.split(",")):
        print(f"\nbest / exact optimum after {budget} measurements, median over seeds "
              f"{args.seeds} (min-max)" + (f", profile {args.estimate:.0%} off" if args.estimate else "")
              + (f", with {' '.join(args.train_flags)}" if args.train_flags else "") + "\n")
        print("| model | accelerator | " + " | ".join(columns) + " |")
        print("|---|---|" + "---|" * len(columns))
        for (model, acc), by_label in by_case.items():
            star = "" if all(c["proven"] for c in by_label.values()) else " *"
            cells = []
            for label in columns:
                c = by_label.get(label)
                ratios = ([best_at(curve, budget, opt) for curve, opt in c["curves"]]
                          + [r for r in c["ratios"] if math.isinf(r)]) if c else []
                cells.append(cell(ratios))
            print(f"| {model} | {acc}{star} | " + " | ".join(cells) + " |")
    print(f"\nmeasurements / wall seconds until the best was within {TARGET}x of the exact "
          f"optimum, median over seeds {args.seeds} (k/n runs: only k got there; >N: fewer than "
          "half did, N the measurements they made); the seconds run from the run's start "
          "(baselines, planning, solving and measuring)\n")
    print("| model | accelerator | " + " | ".join(columns) + " |")
    print("|---|---|" + "---|" * len(columns))
    for (model, acc), by_label in by_case.items():
        cells = []
        for label in columns:
            c = by_label.get(label)
            n, s = target_cells(c["curves"]) if c else ("-", "-")
            cells.append(n if s == "-" else f"{n.split(' (')[0]} / {s}")
        print(f"| {model} | {acc} | " + " | ".join(cells) + " |")
    if args.plot:  # the median best after every measurement, one line per method and guide mode
        plot([c | {"method": label} for by_label in by_case.values() for label, c in by_label.items()],
             args.plot, max(int(b) for b in args.budgets.split(",")))
        print(f"\ncurves written to {args.plot}")
    if args.json:
        import json

        Path(args.json).write_text(json.dumps(
            [c | {"method": label} for by_label in by_case.values() for label, c in by_label.items()],
            default=str))
    if REFERENCES:
        print("\nwhat each row divides by (the solver on the simulator's costs):\n")
        for (model, devices), text in REFERENCES.items():
            print(f"- {model} on {', '.join(devices)}: {text}")


if __name__ == "__main__":
    main()
