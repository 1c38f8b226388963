"""``python -m bench.gpu_check``: the sections in order, the report, the verdicts (see the
package docstring)."""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

from bench.gpu_check import __doc__ as DOC
from bench.gpu_check import fidelity, offload, speed
from bench.gpu_check.common import Report, release, say

__all__ = ["main", "PLANS", "SECTIONS"]

SECTIONS = ("offload", "fidelity", "speed")

#: the transformer of ``--size tiny``
_GPT2_TINY = "hf:gpt2:n_layer=2:n_embd=64:n_head=2:vocab_size=1000:seq=16"

#: per size: offload models, shares of their weights on the capped device, the methods'
#: equal budget; fidelity models, placements, link-fit splits; speed models, placements,
#: share of nodes on the device; the timing's precision (None: the default)
PLANS = {
    "full": {"offload": ["hf:gpt2:n_layer=24:n_embd=1024:n_head=16:seq=128",
                         "hf:llama:num_hidden_layers=6:hidden_size=2048:intermediate_size=5504:"
                         "num_attention_heads=16:num_key_value_heads=16:seq=128",
                         "tv:resnet152"],
             "shares": (0.4, 0.6, 0.8), "budget": 20,
             "fidelity": ["tv:resnet50", "hf:distilbert"], "placements": 24, "fit": 6,
             "speed": [("tv:resnet50", 40, 0.5), ("hf:gpt2:n_layer=12:seq=128", 40, 0.9)],
             "precision": None},
    # the small models keep the full ones' share of embedding weights (about 15-20%)
    "small": {"offload": ["hf:gpt2:n_layer=4:n_embd=128:n_head=4:vocab_size=4000:seq=32",
                          "hf:llama:num_hidden_layers=2:hidden_size=128:intermediate_size=344:"
                          "num_attention_heads=4:num_key_value_heads=4:vocab_size=2000:seq=32",
                          "tiny_cnn"],
              "shares": (0.4, 0.6, 0.8), "budget": 6,
              "fidelity": ["resnet50", "hf:gpt2:n_layer=4:n_embd=256:n_head=4:seq=32"],
              "placements": 24, "fit": 6,
              "speed": [("tiny_cnn", 16, 0.5), ("hf:gpt2:n_layer=2:n_embd=64:n_head=2:seq=16", 16, 0.9)],
              # fixed blocks: a CPU standing in reaches the default precision only slowly
              "precision": 0.0},
    # every section and method on the smallest models, a transformer and a CNN (CI): the
    # machinery, not the aims
    "tiny": {"offload": [_GPT2_TINY, "tiny_cnn"], "shares": (0.4, 0.8), "budget": 4,
             "fidelity": ["tiny_cnn", _GPT2_TINY], "placements": 10, "fit": 3,
             "speed": [("tiny_cnn", 8, 0.5), (_GPT2_TINY, 8, 0.9)],
             "precision": 0.0},
}


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=DOC,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="folder for gpu_check.json and gpu_check.md")
    ap.add_argument("--gpu", default="cuda:0", help="the GPU's device (default cuda:0; cpu:threads=1 "
                    "stands in for it on a machine without one)")
    ap.add_argument("--size", choices=tuple(PLANS), help="model sizes (default: full on a CUDA "
                    "device, small with a CPU device standing in; tiny runs every section and "
                    "method once on the smallest models, as CI does)")
    ap.add_argument("--skip", default="", help=f"sections to skip, comma-separated ({', '.join(SECTIONS)})")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    if skip - set(SECTIONS):
        ap.exit(2, f"unknown section {sorted(skip - set(SECTIONS))[0]!r} in --skip; the sections "
                   f"are {', '.join(SECTIONS)}\n")
    import torch

    cuda = args.gpu.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        ap.exit(2, f"--gpu {args.gpu}: PyTorch sees no CUDA device here; on a machine without one "
                   "give --gpu cpu:threads=1\n")
    size = args.size or ("full" if cuda else "small")
    plan = PLANS[size]
    report = Report(Path(args.out))
    gpu_name = torch.cuda.get_device_name(0) if cuda else f"{args.gpu}, the CPU standing in for a GPU"
    report.data.update(device=gpu_name, torch=torch.__version__, python=platform.python_version(),
                       cpu_threads=torch.get_num_threads(), size=size)
    note = ("" if size == "full" else
            f" Models scaled down from the issue's sizes (--size {size}) so the check fits minutes "
            "on a few CPU cores; --size full runs GPT-2 medium, a 1.5 GB Llama-style decoder and "
            "ResNet-152.")
    report.md += [f"# GPU check: cpu + {args.gpu} ({gpu_name})", "",
                  f"PyTorch {torch.__version__}, Python {platform.python_version()}, "
                  f"{torch.get_num_threads()} CPU threads; sizes: {size}.{note}", ""]
    report.write()
    if size != "full":
        say(f"sizes: {size} (scaled down: {args.gpu} stands in for a GPU)")
    t_all, c_all = time.perf_counter(), time.process_time()
    seconds = report.data["section_seconds"] = {}
    if "offload" not in skip:
        t0 = time.perf_counter()
        figs = [offload.offload(spec, args.gpu, plan["shares"], plan["budget"], args.seed, plan["precision"])
                for spec in plan["offload"]]
        report.section("offload", figs, offload.lines(figs, args.gpu, plan["budget"]), offload.judge(figs))
        seconds["offload"] = time.perf_counter() - t0
        release()
    if "fidelity" not in skip:
        t0 = time.perf_counter()
        figs = [fidelity.fidelity(spec, args.gpu, plan["placements"], plan["fit"], plan["precision"]) for spec in plan["fidelity"]]
        report.section("fidelity", figs, fidelity.lines(figs, args.gpu), fidelity.judge(figs))
        seconds["fidelity"] = time.perf_counter() - t0
        release()
    if "speed" not in skip:
        t0 = time.perf_counter()
        figs = [speed.speed(spec, args.gpu, count, share, plan["precision"]) for spec, count, share in plan["speed"]]
        report.section("speed", figs, speed.lines(figs, args.gpu), speed.judge(figs))
        seconds["speed"] = time.perf_counter() - t0
    report.data["seconds"] = time.perf_counter() - t_all
    # CPU seconds of this process, against the wall: how much a busy machine slowed it
    report.data["cpu_seconds"] = time.process_time() - c_all
    try:
        report.data["load_average"] = os.getloadavg()[0]
    except OSError:
        pass
    report.md += ["Sections took " + ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items())
                  + f"; {report.data['seconds']:.0f} s in all ({report.data['cpu_seconds']:.0f} CPU "
                  f"seconds; load average {report.data.get('load_average', float('nan')):.1f} at the end).", ""]
    report.write()
    say(f"done in {report.data['seconds']:.0f} s; figures in {args.out}")
    for name, line in report.data["verdicts"].items():
        print(f"{name}: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
