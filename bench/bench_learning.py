"""How close a learned method gets to the exact optimum: models x accelerators x seeds.

    python bench/bench_learning.py                                  # the full grid, 3 seeds
    python bench/bench_learning.py --methods hsdag,placeto          # both on the same profiles
    python bench/bench_learning.py --models resnet50 --accelerators GPU_SMALLMEM \\
        --seeds 0,1,2,3,4 --profiles prof/ -- --lr 0.003 --no-self-loops

For each model the local CPU is profiled once by OpenVINO and the
accelerators are modeled (saved in ``--profiles`` as ``profile_<model>.json``
and reused, by ``bench_solvers.py`` too, so settings and methods are compared
on the same costs). Each run trains each method of ``--methods`` (default
HSDAG) on the simulator (sequential objective) for ``--budget`` placements and
prints its best latency over the exact optimum of the profile (min cut, or the
MILP with the memory limit), over the best single device, and the number of
distinct placements measured; then the median per case and method. Flags after ``--``
are ``python -m hsdag_ray.train`` flags (its ``--help``), read by its own
parser, for every run; the bench sets the model, devices, profile, budget,
seed, method and output itself.
"""
from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path


def load_or_record(model: str, folder: Path) -> Path:
    """The profile file bench_solvers.py uses (recorded there when missing)."""
    from bench_solvers import model_profile

    _, how = model_profile(model, folder)
    print(f"{model}: profile {how}", flush=True)
    return folder / f"profile_{model}.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet50,inception_v3,bert_base")
    ap.add_argument("--accelerators", default="GPU_MODEL,GPU_SMALLMEM")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--methods", default="hsdag",
                    help="learned methods to compare (comma-separated --method names)")
    ap.add_argument("--budget", type=int, default=500)
    ap.add_argument("--profiles", default="bench/.cache",
                    help="folder of the recorded profiles, shared with bench_solvers.py "
                         "(recorded when missing)")
    ap.add_argument("train_flags", nargs=argparse.REMAINDER,
                    help="after --: python -m hsdag_ray.train flags for every run")
    args = ap.parse_args()
    train_flags = args.train_flags[1:] if args.train_flags[:1] == ["--"] else args.train_flags

    from hsdag_ray.cli import UsageError
    from hsdag_ray.train import config_from_args, train

    try:
        base = config_from_args(train_flags).cfg
    except UsageError as e:
        ap.error(str(e))

    import ray

    seeds = [int(s) for s in args.seeds.split(",")]
    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    medians = []
    methods = args.methods.split(",")
    with tempfile.TemporaryDirectory() as out:
        for model in args.models.split(","):
            profile = load_or_record(model, Path(args.profiles))
            for acc in args.accelerators.split(","):
                for method in methods:
                    ratios, proven_all = [], True
                    for seed in seeds:
                        t0 = time.time()
                        cfg = replace(base, model=model, method=method, backend="simulator",
                                      profile=str(profile), devices=["CPU", acc],
                                      budget=args.budget, env_runners=0, wandb="disabled", out=out,
                                      name=f"{model}-{acc}-{method}-{seed}", seed=seed)
                        s = train(cfg, quiet=True)
                        b = s["baselines"]
                        singles = [v for k, v in b.items()
                                   if k.endswith("_only") and math.isfinite(v)]
                        best = s["method_best_latency_s"]  # the method's own, not a fallback
                        if best is None or "optimum" not in b:
                            print(f"{model:13s} {acc:13s} {method:8s} seed {seed}: no feasible "
                                  f"placement or no optimum ({b})", flush=True)
                            ratios.append(math.inf)
                            continue
                        ratios.append(best / b["optimum"])
                        unproven = s.get("optimum_proven") is False
                        proven_all = proven_all and not unproven
                        print(f"{model:13s} {acc:13s} {method:8s} seed {seed}: "
                              f"{ratios[-1]:.4f}x optimum"
                              + (f" (NOT proven, gap {s['optimum_gap']:.1%})" if unproven else "")
                              + f", {best / min(singles):.3f}x best single, "
                              f"{s['measurements']} distinct of {s['placements']}, "
                              f"{time.time() - t0:.0f} s", flush=True)
                    medians.append((model, acc, method, statistics.median(ratios), proven_all))
    ray.shutdown()
    print(f"\nmedian best/optimum over seeds {args.seeds}, cost features "
          + ("off" if base.no_cost else "on")
          + (f", with {' '.join(train_flags)}" if train_flags else ""))
    for model, acc, method, med, proven in medians:
        print(f"  {model:13s} {acc:13s} {method:8s} {med:.4f}"
              + ("" if proven else "  (optimum not proven)"))


if __name__ == "__main__":
    main()
