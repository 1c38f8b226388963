"""Every placement method at the same budget of measured placements: the comparison table.

    python bench/bench_methods.py                       # 3 models x 2 accelerators x 3 seeds
    python bench/bench_methods.py --methods hsdag,anneal --seeds 0,1,2,3,4 -- --no-cost

Simulator, sequential objective, the local CPU profiled once by OpenVINO plus
a modeled accelerator (unlimited ``GPU_MODEL`` or 64 MB ``GPU_SMALLMEM``), the
same ``--budget`` (500) of placements for every method (learned ones and the
searches without learning). Prints each run, then a markdown table of the
median best/optimum over seeds with the range (min-max); ``*`` marks a case
whose optimum the solver did not prove. Profiles are shared with
``bench_learning.py`` and ``bench_solvers.py`` (``--profiles``).
"""
from __future__ import annotations

from pathlib import Path

from bench_learning import parse, run_grid

from hsdag_ray.results import cell


def main() -> None:
    from policies.registry import METHODS

    default = ",".join(m for m, spec in METHODS.items() if spec.kind in ("rl", "search"))
    args, base = parse(__doc__, default)
    methods = args.methods.split(",")
    cases = run_grid(args.models.split(","), args.accelerators.split(","), methods,
                     [int(s) for s in args.seeds.split(",")], args.budget, Path(args.profiles),
                     base, say=lambda m: print(m, flush=True))
    print(f"\nbest / exact optimum, median over seeds {args.seeds} (min-max), budget "
          f"{args.budget} placements, cost features {'off' if base.no_cost else 'on'}"
          + (f", with {' '.join(args.train_flags)}" if args.train_flags else "") + "\n")
    print("| model | accelerator | " + " | ".join(methods) + " |")
    print("|---|---|" + "---|" * len(methods))
    rows: dict[tuple[str, str], dict[str, dict]] = {}
    for c in cases:
        rows.setdefault((c["model"], c["accelerator"]), {})[c["method"]] = c
    for (model, acc), by_method in rows.items():
        star = "" if all(c["proven"] for c in by_method.values()) else " *"
        print(f"| {model} | {acc}{star} | "
              + " | ".join(cell(by_method[m]["ratios"]) for m in methods) + " |")


if __name__ == "__main__":
    main()
