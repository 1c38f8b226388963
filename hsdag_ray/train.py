"""Learn a placement: ``python -m hsdag_ray.train``.

With no arguments: a local Ray, HSDAG as its paper specifies (REINFORCE, 1/latency,
episodes of 20 placements, grouped placement) on ResNet-50 for 500 placements (a
placement proposed again is answered from the cache, not measured again), W&B
offline; the summary compares the best placement found with the exact optimum and
the best single device. On a machine with two or more real OpenVINO devices (e.g. CPU
and GPU) placements are measured on them; with only a CPU the simulator is used, with
the local CPU profiled by OpenVINO and a modeled accelerator with 64 MB of memory
(``GPU_SMALLMEM``: ResNet-50 does not fit on it, so the optimum is a real split), and
the run says so. ``--guide`` adds the project's search aids to any method (the
exact-solver start, HSDAG's incumbent prior, untried neighbours of the best);
``--method refit --guide`` is the quickest way to the best placement.
Examples::

    python -m hsdag_ray.train
    python -m hsdag_ray.train --method refit --guide --budget 100   # the best placement, fast
    python -m hsdag_ray.train --model bert_base --budget 1000 --env-runners 2
    python -m hsdag_ray.train --backend simulator --devices CPU,GPU_MODEL --method gdp
    python -m hsdag_ray.train --backend auto --devices CPU,CPU_F32 --model tiny_cnn --budget 60
    python -m hsdag_ray.train --config sweep/run.yaml --seed 3
    python -m hsdag_ray.train --address auto --backend auto --devices CPU,GPU   # on a cluster
    python -m hsdag_ray.train --resume runs/resnet50-hsdag-20261122-101500
    python -m hsdag_ray.train --model resnet50 --init pre/pretrained --budget 200   # fine-tune
    python -m hsdag_ray.train --model resnet50 --init pre/pretrained --budget 0     # zero-shot

Outputs go to a run folder (``--out``, default ``runs/``): ``config.json``,
``metrics.jsonl``, ``curve.jsonl`` (the best after every measurement),
``best_placement.json`` (OpenVINO op name -> device),
``summary.json``, ``learning_curve.png``, ``placement.png``, ``checkpoints/<iteration>/``
and ``libraries.log`` (what the libraries underneath printed; ``--verbose``
shows it on the console instead).
"""
from __future__ import annotations

import sys
from typing import Optional, Sequence

from hsdag_ray import console
from hsdag_ray.arguments import config_from_args
from hsdag_ray.cli import run
from hsdag_ray.run.training import train

__all__ = ["main"]


def main(argv: Optional[Sequence[str]] = None) -> int:
    command = config_from_args(argv, __doc__)
    summary = train(command.cfg, command.resume, library_log=not command.verbose)
    console.print_result(summary, quiet=False)
    return 0


if __name__ == "__main__":
    sys.exit(run(main, prog="hsdag_ray.train"))
