r"""How close a learned method gets to the exact optimum: models x accelerators x seeds.

    python bench/bench_learning.py                                  # the full grid, 3 seeds
    python bench/bench_learning.py --methods hsdag,placeto          # both on the same profiles
    python bench/bench_learning.py --models resnet50 --accelerators GPU_SMALLMEM \
        --seeds 0,1,2,3,4 --profiles prof/ -- --lr 0.003 --no-self-loops
    python bench/bench_learning.py --profiles prof/ -- --incumbent --stall-patience 3 \
        --stall-entropy 0.01 --stall-shrink 0.3      # the exploration options
    python bench/bench_learning.py --profiles prof/ -- --segment-moves   # segment moves
    python bench/bench_learning.py --merge old.json=old,new.json=new --plot curves.png

For each model the local CPU is profiled once by OpenVINO and the
accelerators are modeled (saved in ``--profiles`` as ``profile_<model>.json``
and reused, by ``bench_solvers.py`` too, so settings and methods are compared
on the same costs). Each run trains each method of ``--methods`` (default
HSDAG) on the simulator (sequential objective unless given) for the largest of ``--budgets`` placements and
prints its best latency over the exact optimum of the profile (min cut, or the
MILP with the memory limit), over the best single device, and the number of
distinct placements measured; then, per case and method, the median and range
over seeds of best/optimum after each of ``--budgets`` measurements (read from the
run's best after every measurement, so one run gives the whole curve and "after 10"
means 10 for every method; cached repeats are not measurements), the measurements and
the wall seconds until the run's best was within 1.01x (the seconds from the run's
start: its baselines, the method's planning and solving and every measurement), and
``--plot FILE`` draws the median curves. Each run's budget counts placements proposed
unless ``-- --budget-unit measurements``; a run that measured fewer than a column's
count is read after all of its own. Flags after ``--``
are ``python -m hsdag_ray.train`` flags (its ``--help``), read by its own
parser, for every run; the bench sets the model, devices, profile, budget,
seed, method and output itself.

With ``--estimate SIGMA`` a run knows its costs only roughly, as on a real
machine: the simulator measures with the (possibly ``--jitter``-ed) profile,
the run is given a variant of it with every op time off by its own factor
``exp(SIGMA * N(0, 1))`` (``train --sim-profile``), from which it takes its node
features, memory repair and start. Ratios are then over the optimum of the
costs measured, and a row ``exact (profile)`` gives the exact solver's
placement on the run's profile, measured: what solving the profile without
any measurement gets.

The objective is the runs' own (``-- --objective parallel``): where no exact
solver applies to it (``parallel``), ratios are over HEFT's placement on the
costs measured instead of an optimum (below 1 where a method beats HEFT), and
with ``--estimate`` the row is ``heft (profile)``, HEFT on the run's profile.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.learning_curves import learning_state, measured_curve, optimum_shape, plot, summarize


def load_or_record(model: str, folder: Path, jitter: str = "") -> Path:
    """The profile file bench_solvers.py uses (recorded there when missing), or,
    with ``jitter`` = ``SIGMA:SEED``, a variant of it written beside it."""
    from bench.bench_solvers import model_profile

    _, how = model_profile(model, folder)
    print(f"{model}: profile {how}", flush=True)
    path = folder / f"profile_{model}.json"
    if not jitter:
        return path
    sigma, _, seed = jitter.partition(":")
    out = folder / f"profile_{model}_jitter{sigma}_seed{seed or 0}.json"
    write_atomic(out, json.dumps(jittered(json.loads(path.read_text()), float(sigma), int(seed or 0))))
    return out


def write_atomic(path: Path, text: str) -> None:
    """Write by renaming a finished file into place: benches run side by side read
    the same profiles while one of them writes them again."""
    part = path.with_name(f"{path.name}.{os.getpid()}.part")
    part.write_text(text)
    os.replace(part, path)


def jittered(profile: dict, sigma: float, seed: int) -> dict:
    """A variant of a profile (its JSON dict): every op's time on every device
    multiplied by its own log-normal factor ``exp(sigma * N(0, 1))``, so which
    device is faster for an op, and by how much, changes as it does between
    machines and between recordings under different loads; memory and links
    are kept. Devices that share a spec (GPU_MODEL and GPU_SMALLMEM) get the
    same factors, so they still differ only in memory."""
    rng = np.random.default_rng(seed)
    out = json.loads(json.dumps(profile))
    factors: dict[str, dict[str, float]] = {}
    for dev, times in out["op_time_s"].items():
        spec = dict(out["devices"].get(dev, {}).get("spec") or {"device": dev})
        spec.pop("memory_bytes", None)
        f = factors.setdefault(json.dumps(spec, sort_keys=True),
                               {op: float(np.exp(sigma * rng.standard_normal())) for op in sorted(times)})
        out["op_time_s"][dev] = {op: t * f.get(op, 1.0) for op, t in times.items()}
    return out


def devices_of(accelerators: str) -> list[str]:
    """The run's devices for an entry of ``--accelerators``: the CPU and the accelerator,
    or with ``A+B+...`` the CPU and each of them (three or four devices)."""
    return ["CPU", *accelerators.split("+")]



def measured_reference(model: str, profile: Path, devices: list[str], coarsen: str,
                       objective: str, time_limit: float) -> float:
    """What ratios divide by: the exact optimum of the costs in ``profile`` (what the
    simulator measures with) for ``objective``, or, where no exact solver applies
    (``parallel``), HEFT's placement on them. Solved here because a run with
    ``--estimate`` solves its own wrong profile, and a parallel run has no optimum."""
    from envs.simulator import Simulator
    from policies.solvers.exact import exact_method, heuristic_method, solve
    from hsdag_core.coarsening import build_graph
    from hsdag_core.device_profile import Profile, cost_graph

    _, _, graph, _ = build_graph(model, coarsen)
    cg = cost_graph(graph, Profile.load(profile), devices)
    method = exact_method(cg, objective) or heuristic_method(objective)
    res = solve(cg, objective, method, time_limit=time_limit)
    REFERENCES[(model, tuple(devices))] = reference_text(method, res.optimal, res.gap)
    SHAPES[(model, tuple(devices))] = optimum_shape(graph, res.placement)
    return float(Simulator(cg).evaluate(np.asarray(res.placement), objective).value)


#: per (model, devices): which solver gave the reference a ratio divides by, and its proof
REFERENCES: dict[tuple[str, tuple[str, ...]], str] = {}

#: per (model, devices): :func:`optimum_shape` of the reference placement
SHAPES: dict[tuple[str, tuple[str, ...]], dict] = {}



def reference_text(method: str, proven: bool, gap) -> str:
    """``mincut, proven optimal`` or ``milp, gap 0.4% (not proven)``: what a reference is."""
    if proven:
        return f"{method}, proven optimal"
    return f"{method}, " + (f"gap {gap:.2%} (not proven)" if gap is not None and math.isfinite(gap)
                            else "a heuristic (no bound)")


def over_what(objective: str) -> tuple[str, str]:
    """What a run's best is divided by, as (its baselines' key, its name in the tables):
    the exact optimum, or HEFT's placement where no exact solver applies to ``objective``."""
    from policies.solvers.exact import heuristic_method

    heuristic = heuristic_method(objective)  # what runs are given where no exact solver applies
    return ("optimum", "optimum") if heuristic is None else (heuristic, heuristic.upper())


def estimate_of(profile: Path, sigma: float) -> Path:
    """The run's rough profile of the costs in ``profile``, written beside it."""
    out = profile.with_name(f"{profile.stem}_estimate{sigma}.json")
    write_atomic(out, json.dumps(jittered(json.loads(profile.read_text()), sigma, 1000)))
    return out


def _best_by_guide(summary: dict) -> bool:
    """Whether a run's best measured placement was one of the guide's proposals
    (``--refit-every``'s or ``--neighbour-every``'s) rather than the method's own."""
    if not summary.get("suggested"):
        return False
    log = json.loads((Path(summary["run_dir"]) / "store.json").read_text())["log"]
    ok = [e for e in log if e["ok"]]
    return bool(ok) and bool(min(ok, key=lambda e: e["latency_s"]).get("suggested"))


def run_grid(models, accelerators, methods, seeds, budget: int, profiles: Path, base,
             say=print, on_case=None, jitter: str = "", estimate: float = 0.0) -> list[dict]:
    """Train every method on every (model, accelerator) for every seed on the
    recorded profiles; one dict per case: ``model``, ``accelerator``,
    ``method``, ``ratios`` (best/optimum per seed, ``inf`` when nothing was
    feasible), ``curves`` (per seed, :func:`measured_curve`: ``(measurements,
    best latency so far or None, wall seconds)`` after every measurement, and the optimum), ``proven`` (every optimum
    proven). ``on_case(cases)`` is called after every case (to save partial results)."""
    import ray

    from hsdag_ray.run.training import train

    own, ref = over_what(base.env.objective)
    exact = own == "optimum"
    from hsdag_ray.run.local_ray import start_or_join

    started = start_or_join()
    cases = []
    with tempfile.TemporaryDirectory() as out:
        for model in models:
            profile = load_or_record(model, Path(profiles), jitter)
            known = estimate_of(profile, estimate) if estimate > 0 else profile
            for acc in accelerators:
                optimum, exact_ratios = None, []
                if estimate > 0 or not exact:
                    optimum = measured_reference(model, profile, devices_of(acc), base.env.coarsen,
                                                 base.env.objective, base.run.solver_time_limit)
                for method in methods:
                    ratios, curves, proven_all, by_guide, states, bests = [], [], True, [], [], []
                    for seed in seeds:
                        t0 = time.time()
                        cfg = base.replace(model=model, method=method, backend="simulator",
                                      profile=str(known), devices=devices_of(acc),
                                      sim_profile=str(profile) if estimate > 0 else "",
                                      budget=budget, env_runners=0, wandb="disabled", out=out,
                                      name=f"{model}-{acc}-{method}-{seed}", seed=seed)
                        s = None
                        for attempt in (1, 2):  # a run killed from outside (memory) is run again
                            try:
                                s = train(cfg.replace(name=f"{cfg.run.name}-{attempt}"), quiet=True)
                                break
                            except Exception as e:  # noqa: BLE001 - reported, the grid goes on
                                say(f"{model} {acc} {method} seed {seed}: run {attempt} failed "
                                    f"({type(e).__name__}: {str(e).splitlines()[0][:120]})")
                        if s is None:
                            ratios.append(math.nan)
                            continue
                        b = s["baselines"]
                        singles = [v for k, v in b.items()
                                   if k.endswith("_only") and math.isfinite(v)]
                        best = s["method_best_latency_s"]  # the method's own, not a fallback
                        if best is None or (optimum is None and own not in b):
                            say(f"{model:13s} {acc:13s} {method:8s} seed {seed}: no feasible "
                                f"placement or no {ref} ({b})")
                            ratios.append(math.inf)
                            continue
                        opt = b[own] if optimum is None else optimum
                        if optimum is not None and own in b:
                            exact_ratios.append(b[own] / optimum)
                        ratios.append(best / opt)
                        curves.append((measured_curve(s), opt))
                        states.append(learning_state(s))
                        bests.append((json.loads((Path(s["run_dir"]) / "store.json").read_text())["best"] or {}).get("placement"))
                        by_guide.append(_best_by_guide(s))
                        if optimum is None and s.get("optimum_method"):
                            REFERENCES[(model, tuple(cfg.env.devices))] = reference_text(
                                s["optimum_method"], bool(s.get("optimum_proven")),
                                s.get("optimum_gap"))
                        unproven = s.get("optimum_proven") is False
                        proven_all = proven_all and not unproven
                        say(f"{model:13s} {acc:13s} {method:8s} seed {seed}: "
                            f"{ratios[-1]:.4f}x {ref}"
                            + (f" (NOT proven, gap {s['optimum_gap']:.1%})" if unproven else "")
                            + f", {best / min(singles):.3f}x best single, "
                            f"{s['measurements']} distinct of {s['placements']}, "
                            + (f"{s['suggested']} the guide's, best {'the guide' if by_guide[-1] else 'its own'}'s, "
                               if s.get("suggested") else "")
                            + f"{time.time() - t0:.0f} s")
                    cases.append({"model": model, "accelerator": acc, "method": method,
                                  "ratios": ratios, "curves": curves, "proven": proven_all,
                                  "unit": base.run.budget_unit, "best_by_guide": by_guide,
                                  "states": states, "best_placements": bests,
                                  "shape": SHAPES.get((model, tuple(devices_of(acc))))})
                    if on_case is not None:
                        on_case(cases)
                if estimate > 0 and exact_ratios:
                    # measured once per run, the same placement each time: one point at 1
                    r = exact_ratios[0]
                    solver = "exact solver" if exact else "HEFT"
                    say(f"{model:13s} {acc:13s} {solver} on the run's profile: {r:.4f}x {ref}")
                    cases.append({"model": model, "accelerator": acc,
                                  "method": f"{'exact' if exact else 'heft'} (profile)",
                                  "ratios": [r], "curves": [([(1, r * optimum, None)], optimum)],
                                  "proven": True, "unit": base.run.budget_unit})
                    if on_case is not None:
                        on_case(cases)
    if started:
        ray.shutdown()
    return cases


def parse(description: str, default_methods: str, guide_modes: bool = False, extra=None):
    """The command line shared by the learning benchmarks: (args, base TrainConfig);
    ``guide_modes`` adds ``--guide off|on|both`` (each method as published, guided, or both),
    ``extra(parser)`` a bench's own flags."""
    ap = argparse.ArgumentParser(description=description,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    if extra is not None:
        extra(ap)
    if guide_modes:
        ap.add_argument("--guide", choices=("off", "on", "both"), default="both",
                        help="run every method as published (off), with train --guide (on) "
                             "or both ways (default)")
    ap.add_argument("--models", default="resnet50,inception_v3,bert_base")
    ap.add_argument("--accelerators", default="GPU_MODEL,GPU_SMALLMEM",
                    help="modeled accelerators beside the CPU, one device set each; A+B puts "
                         "several in one set (e.g. GPU_SMALLMEM+GPU_TINYMEM+NPU_MODEL: four devices)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--methods", default=default_methods,
                    help="methods to compare (comma-separated --method names)")
    ap.add_argument("--budget", type=int, default=500)
    ap.add_argument("--budgets", default="100,200,500",
                    help="placement counts at which best/optimum is reported (the largest "
                         "is each run's budget)")
    ap.add_argument("--plot", default="", help="write the median curves to this image file")
    ap.add_argument("--json", default="", help="write every case (ratios and curves) as JSON")
    ap.add_argument("--merge", default="",
                    help="run nothing: read earlier --json files (FILE=LABEL,...; HSDAG's cases "
                         "renamed LABEL, e.g. old/new settings) and print and plot them together")
    ap.add_argument("--profiles", default="bench/.cache",
                    help="folder of the recorded profiles, shared with bench_solvers.py "
                         "(recorded when missing)")
    ap.add_argument("--jitter", default="",
                    help="SIGMA:SEED: run on a variant of each recorded profile, every op's "
                         "time on every device times exp(SIGMA * N(0,1)) (e.g. 0.3:1), to "
                         "check a setting on other cost landscapes than the one recorded")
    ap.add_argument("--estimate", type=float, default=0.0,
                    help="SIGMA: runs know the costs only roughly, every op time of their profile "
                         "off by exp(SIGMA * N(0,1)) from what the simulator measures (e.g. 0.2)")
    ap.add_argument("train_flags", nargs=argparse.REMAINDER,
                    help="after --: python -m hsdag_ray.train flags for every run")
    args = ap.parse_args()
    args.train_flags = args.train_flags[1:] if args.train_flags[:1] == ["--"] else args.train_flags

    from hsdag_ray.cli import UsageError
    from hsdag_ray.arguments import config_from_args

    try:
        base = config_from_args(args.train_flags).cfg
    except UsageError as e:
        ap.error(str(e))
    return args, base



def main() -> None:
    args, base = parse(__doc__, "hsdag")
    budgets = sorted(int(b) for b in args.budgets.split(","))
    if args.merge:
        import json

        cases = []
        for item in args.merge.split(","):
            path, _, label = item.partition("=")
            for c in json.loads(Path(path).read_text()):
                c["method"] = label if c["method"] == "hsdag" and label else c["method"]
                c["ratios"] = [float(r) for r in c["ratios"]]
                cases.append(c)
        cases.sort(key=lambda c: (c["model"], c["accelerator"], c["method"]))
        print("\n".join(summarize(cases, budgets)))
        if args.plot:
            plot(cases, args.plot, budgets[-1])
        return
    def save(cases: list[dict]) -> None:
        if args.json:
            import json

            Path(args.json).write_text(json.dumps(cases, default=str))

    cases = run_grid(args.models.split(","), args.accelerators.split(","),
                     args.methods.split(","), [int(s) for s in args.seeds.split(",")],
                     budgets[-1], Path(args.profiles), base, say=lambda m: print(m, flush=True),
                     on_case=save, jitter=args.jitter, estimate=args.estimate)
    print(f"\nbest/{over_what(base.env.objective)[1]} ({base.env.objective} objective), median [min-max] over seeds {args.seeds} at "
          f"{', '.join(map(str, budgets))} measurements (runs' budget in {base.run.budget_unit}), cost features "
          + ("off" if (not base.features.cost) else "on")
          + (f", with {' '.join(args.train_flags)}" if args.train_flags else "")
          + (f", profiles jittered by {args.jitter}" if args.jitter else "")
          + (f", runs' profiles off by sigma {args.estimate}" if args.estimate else ""))
    print("\n".join(summarize(cases, budgets)), flush=True)
    if args.plot:
        plot(cases, args.plot, budgets[-1])
        print(f"curves written to {args.plot}")


if __name__ == "__main__":
    main()
