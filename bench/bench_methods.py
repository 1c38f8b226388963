"""Every placement method at the same budget, as published and guided: the comparison table.

    python bench/bench_methods.py --budget 200 --budgets 50,200 --estimate 0.5 \\
        --models resnet50,inception_v3,bert_base,tv:mobilenet_v3_small,tv:regnet_y_400mf,hf:t5,hf:gpt2
    python bench/bench_methods.py --methods hsdag,anneal --guide off --seeds 0,1,2,3,4 -- --no-cost
    python bench/bench_methods.py --guide off --seeds 0 --budgets 50,200 --estimate 0.5 \\
        --accelerators GPU_SMALLMEM+NPU_MODEL,GPU_SMALLMEM+GPU_TINYMEM+NPU_MODEL   # 3 and 4 devices
    python bench/bench_methods.py --guide off --methods hsdag,placeto,rnn,gdp --seeds 0 --budget 1000 \\
        --budgets 10,100,500,1000 --estimate 0.5 --models tv:mobilenet_v2 --accelerators GPU_SMALLMEM \\
        --dynamics bench/figures/learning_1000.png -- --budget-unit measurements

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
measurements and ``--json FILE`` writes every case; ``--merge A.json,B.json`` prints and
draws earlier ``--json`` files together instead of running (a long grid split over
processes). ``--dynamics FILE`` adds, for the learned methods, a table of best/optimum at
``--budgets``, the measurements to 1.05x and 1.01x, the policy's entropy and number of
groups at its last iteration (each method's own entropy, from the run's
``metrics.jsonl``) and what the optimum asks a grouping for (its coarsened nodes off its
main device and the connected pieces they form), and draws best/optimum, entropy and
groups against measurements. ``--accelerators A+B`` runs on the CPU and several
accelerators. Profiles are shared with ``bench_learning.py`` and
``bench_solvers.py`` (``--profiles``).
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path

from bench.bench_learning import REFERENCES, parse, run_grid
from bench.learning_curves import TARGET, best_at, plot, target_cells, to_target

from hsdag_ray.run.results import cell


def _flags(ap) -> None:
    ap.add_argument("--dynamics", default="",
                    help="FILE: also print the learning table (best/optimum at --budgets, "
                         "measurements to 1.05x and 1.01x, final entropy and groups, what the "
                         "optimum moves) and draw best/optimum, entropy and groups against "
                         "measurements, one column per model, to FILE")


def _median(xs: list[float]) -> float:
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return statistics.median(xs) if xs else math.nan


def dynamics_table(cases: list[dict], budgets: list[int]) -> list[str]:
    """One markdown row per learned (method, model, accelerator): median over seeds of
    best/optimum after each budget's measurements, the measurements to 1.05x and 1.01x
    (``>N``: not within N), the policy's entropy and number of groups at its last
    iteration, the optimum's shape (coarsened nodes off its main device / all, and the
    connected pieces they form) and how many nodes the run's best places otherwise."""
    lines = ["| method | model | accelerator | " + " | ".join(f"{b}" for b in budgets)
             + " | to 1.05x | to 1.01x | final entropy | final groups | optimum moves "
             "| best's nodes off the optimum's |", "|" + "---|" * (9 + len(budgets))]
    for c in cases:
        if not c.get("states") or not c["curves"]:
            continue
        cells = [cell([best_at(cv, b, opt) for cv, opt in c["curves"]]) for b in budgets]
        for factor in (1.05, TARGET):
            hits = [to_target(cv, opt, factor)[0] for cv, opt in c["curves"]]
            made = _median([cv[-1][0] for cv, _ in c["curves"] if cv])
            med = statistics.median(hits)
            cells.append(f"{med:.0f}" if math.isfinite(med) else f">{made:.0f}")
        last = [st[-1] for st in c["states"] if st]
        ent, grp = _median([r[1] for r in last]), _median([r[2] for r in last])
        cells += [f"{ent:.3f}" if math.isfinite(ent) else "-",
                  f"{grp:.1f}" if math.isfinite(grp) else "-"]
        sh = c.get("shape") or {}
        cells.append(f"{sh['moved']}/{sh['nodes']} ({sh['pieces']} pieces)" if sh else "-")
        off = [sum(a != b for a, b in zip(p, sh["placement"]))
               for p in c.get("best_placements") or [] if p and sh.get("placement")]
        cells.append(f"{_median(off):.0f}" if off else "-")
        lines.append(f"| {c['method']} | {c['model']} | {c['accelerator']} | " + " | ".join(cells) + " |")
    return lines


def plot_dynamics(cases: list[dict], path: str, budget: int) -> None:
    """Per (model, accelerator) column: best/optimum after every measurement, and the
    policy's entropy and number of groups per iteration, against measurements; one colour
    per method, one line per seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = [c for c in cases if c.get("states")]
    panels = sorted({(c["model"], c["accelerator"]) for c in cases})
    methods = list(dict.fromkeys(c["method"] for c in cases))
    fig, axes = plt.subplots(3, len(panels), figsize=(4.6 * len(panels), 8.4), squeeze=False)
    for j, (model, acc) in enumerate(panels):
        for c in (c for c in cases if (c["model"], c["accelerator"]) == (model, acc)):
            colour = plt.cm.tab10(methods.index(c["method"]) % 10)
            for k, ((cv, opt), st) in enumerate(zip(c["curves"], c["states"])):
                label = c["method"] if k == 0 else None
                xs = list(range(1, budget + 1))
                ys = [best_at(cv, x, opt) for x in xs]
                axes[0, j].plot(xs, [y if math.isfinite(y) else math.nan for y in ys],
                                color=colour, label=label)
                n = [r[0] for r in st]
                for row, key in ((1, 1), (2, 2)):
                    vals = [r[key] if r[key] is not None else math.nan for r in st]
                    if any(math.isfinite(v) for v in vals):
                        axes[row, j].plot(n, vals, color=colour, label=label)
        axes[0, j].axhline(1.05, ls=":", lw=0.8, color="grey")
        axes[0, j].axhline(TARGET, ls="--", lw=0.8, color="grey")
        axes[0, j].set_ylim(0.99, 1.6)
        axes[0, j].set_title(f"{model} / {acc}", fontsize=9)
        for row, name in enumerate(("best / optimum", "entropy", "groups")):
            axes[row, j].set_xscale("log")
            axes[row, j].set_xlim(1, budget)
            axes[row, j].set_ylabel(name, fontsize=8)
            axes[row, j].set_xlabel("measurements", fontsize=8)
        axes[1, j].set_yscale("symlog", linthresh=0.01)  # a collapse to near 0 stays visible
        axes[1, j].set_ylim(bottom=0)
        axes[0, j].legend(fontsize=7)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    from policies.registry import METHODS

    args, base = parse(__doc__, ",".join(METHODS), guide_modes=True, extra=_flags)
    methods = args.methods.split(",")
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.guide]
    columns, by_case = [], {}
    if args.merge:  # earlier --json files instead of runs
        import json

        modes = []
        for item in args.merge.split(","):
            for c in json.loads(Path(item.partition("=")[0]).read_text()):
                c["ratios"] = [float(r) for r in c["ratios"]]
                columns += [c["method"]] if c["method"] not in columns else []
                by_case.setdefault((c["model"], c["accelerator"]), {})[c["method"]] = c
    for guided in modes:
        cases = run_grid(args.models.split(","), args.accelerators.split(","), methods,
                         [int(s) for s in args.seeds.split(",")], args.budget, Path(args.profiles),
                         base.replace(guide=guided), say=lambda m: print(m, flush=True),
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
    if args.dynamics:
        cases = [c | {"method": label} for by_label in by_case.values() for label, c in by_label.items()]
        budgets = sorted(int(b) for b in args.budgets.split(","))
        print(f"\nlearned methods: best/optimum after {', '.join(map(str, budgets))} measurements, "
              "measurements to 1.05x and 1.01x, entropy and groups at the last iteration\n")
        print("\n".join(dynamics_table(cases, budgets)))
        plot_dynamics(cases, args.dynamics, budgets[-1])
        print(f"\nlearning curves written to {args.dynamics}")
    if REFERENCES:
        print("\nwhat each row divides by (the solver on the simulator's costs):\n")
        for (model, devices), text in REFERENCES.items():
            print(f"- {model} on {', '.join(devices)}: {text}")


if __name__ == "__main__":
    main()
