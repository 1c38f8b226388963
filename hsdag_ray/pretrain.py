"""Pre-train one policy on a family of graphs: ``python -m hsdag_ray.pretrain``.

The policy (``--method``: any learned method whose environment observes the
padded graph: ``hsdag``, ``placeto``, ``gdp``) is trained with RLlib on the
family's training graphs (:mod:`hsdag_core.families`), a graph drawn per
episode (:class:`envs.multi_graph.MultiGraphEnv`), on the simulator with
devices modeled from specs (``CPU_MODEL`` and ``--family-accelerator``: by
default ``GPU_PARTMEM``, holding half of each graph's weights; ``NPU_MODEL``,
unlimited memory but slow on memory-bound ops), for ``--budget`` placements in
all (default 2000). With
``--imitate-steps K`` the policy first learns, in ``K`` gradient steps, to
place each training graph as the exact solver's optimum does
(:mod:`policies.imitate`; no measurement: the family's costs are the
simulator's), then does ``--budget`` placements of reinforcement; left unset,
that budget is the method's own after imitation (``Method.budget_after_imitation``
in ``policies/registry.py``): 0 for Placeto, imitation only (its reinforcement
after imitation undid the imitation on held-out graphs in 2 of 5 pre-training
seeds; docs/results/transfer.md), 2000 for HSDAG and GDP. Pre-training defaults to the ``speedup`` reward (each graph's
best single device over the placement's latency, one scale for all graphs)
and to scale-free node features (``--relative-features``); ``train --init``
adopts both. Examples::

    python -m hsdag_ray.pretrain --method hsdag --family synthetic --budget 4000 --out pre
    python -m hsdag_ray.pretrain --method gdp --family synthetic --imitate-steps 300 --budget 500
    python -m hsdag_ray.pretrain --method placeto --family tiny --budget 600 --out /tmp/pre
    python -m hsdag_ray.pretrain --method placeto --family real --imitate-steps 300   # imitation only

Writes to ``--out`` (default ``runs/``) a folder ``<family>-<method>-pretrain``:
``pretrained.pt`` (the RLModule's weights and its settings; ``train --init``
reads it), ``pretrained.json``, ``graphs.json`` (every graph of the family,
train and held out, with the profile file to place it with) and
``profiles/``. Then, on a held-out graph::

    python -m hsdag_ray.train --model SPEC --backend simulator --devices CPU_MODEL,GPU_PARTMEM \\
        --profile DIR/profiles/FILE.json --init DIR --budget 0    # zero-shot
    ... --budget 200                                              # fine-tune

(``--devices CPU_MODEL,NPU_MODEL`` after ``--family-accelerator NPU_MODEL``;
``graphs.json`` lists the devices.)

Every setting of ``python -m hsdag_ray.train`` applies (``--lr``,
``--hidden-dim``, ``--episodes-per-iteration``, ``--reward`` ...) except the
model, backend, devices and profile, which the family sets.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional, Sequence

from envs.backends import SIMULATOR
from hsdag_ray import console
from hsdag_ray.arguments import build_parser, given_settings
from hsdag_ray.cli import UsageError, run, writable_dir
from hsdag_ray.run.config import TrainConfig
from hsdag_ray.run.pretraining import DEFAULT_BUDGET, PRETRAIN_DEFAULTS, default_budget, pretrain
from hsdag_core.families import ACCELERATOR

__all__ = ["main"]


def main(argv: Optional[Sequence[str]] = None) -> int:
    from hsdag_core.families import FAMILIES, FAMILY_ACCELERATORS
    from policies.registry import METHODS

    budget_help = (
        f"placements of reinforcement over the training graphs (default: {DEFAULT_BUDGET}; after "
        "--imitate-steps the method's own: " + ", ".join(
            f"{m.name} {m.budget_after_imitation}" for m in METHODS.values()
            if m.approach == "rl" and m.budget_after_imitation is not None)
        + f", the others {DEFAULT_BUDGET}); 0 with --imitate-steps: imitation only")
    ap = build_parser(help_for={"budget": budget_help, "incumbent_prior": (
        "HSDAG samples around each graph's best placement so far by this logit (default in "
        f"pre-training: {PRETRAIN_DEFAULTS['incumbent_prior']:g}, off; in train it is on "
        "with --guide only)"), "imitate_steps": (
        "first imitate each training graph's exact optimum for this many steps (the "
        "simulator's costs make it free of measurements; see policies/imitate.py), then "
        "--budget placements of reinforcement")})
    ap.prog, ap.description = "python -m hsdag_ray.pretrain", __doc__
    ap.add_argument("--family", required=True,
                    help="graph family: " + "; ".join(f"{k} ({f.description})" for k, f in FAMILIES.items()))
    ap.add_argument("--family-accelerator", default=ACCELERATOR, metavar="NAME",
                    help="the accelerator next to CPU_MODEL on every graph: " + "; ".join(
                        f"{k} ({v})" for k, v in FAMILY_ACCELERATORS.items()) + f"; default {ACCELERATOR}")
    args = ap.parse_args(argv)
    if args.family_accelerator not in FAMILY_ACCELERATORS:
        raise UsageError(f"unknown --family-accelerator {args.family_accelerator!r}; choose one of "
                         f"{', '.join(FAMILY_ACCELERATORS)}")
    if args.family not in FAMILIES:
        raise UsageError(f"unknown graph family {args.family!r}; choose one of {', '.join(FAMILIES)}")
    given = given_settings(args)
    for flag, key in (("model", "run.model"), ("backend", "env.backend"), ("devices", "env.devices"),
                      ("profile", "env.profile"), ("init", "run.init"), ("resume", "")):
        if given.get(key) is not None or (flag == "resume" and args.resume):
            raise UsageError(f"--{flag} is set by the family in pre-training; leave it out")
    cfg = TrainConfig.of(**PRETRAIN_DEFAULTS).with_settings(given, source="the command line")
    # imitation here is of the family's training graphs, done below, not a run's start
    imitate_steps = cfg.guide.imitate_steps
    if imitate_steps < 0:
        raise UsageError(f"--imitate-steps must be 0 or more, got {imitate_steps}")
    cfg = cfg.replace(imitate_steps=0)
    if "run.budget" not in given:
        cfg = cfg.replace(budget=default_budget(cfg.run.method, imitate_steps))
    if cfg.run.budget == 0 and not imitate_steps:
        raise UsageError("--budget 0 pre-trains nothing without --imitate-steps; give one or both")
    cfg = cfg.replace(backend=SIMULATOR, wandb="disabled")
    # a budget of 0 after imitation is pre-training's own (imitation only), not train's zero-shot
    cfg.replace(budget=cfg.run.budget or 1).validate()
    out = Path(cfg.run.out or "runs").resolve() / (cfg.run.name or f"{args.family}-{cfg.run.method}-pretrain")
    writable_dir(out)
    # what Ray, RLlib and torch print goes to the checkpoint folder, as in a training run
    with console.libraries_to(None if args.verbose else out / "libraries.log"):
        pretrain(cfg, args.family, out, say=console.say(False), imitate_steps=imitate_steps,
                 accelerator=args.family_accelerator)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(run(main, prog="hsdag_ray.pretrain"))
