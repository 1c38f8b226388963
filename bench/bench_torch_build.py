"""Building torch placements: seconds per placement with and without the stage cache.

    python bench/bench_torch_build.py
    python bench/bench_torch_build.py --models tv:resnet50,hf:distilbert --placements 40

Before a torch placement runs, its stages are built: one ``GraphModule`` per stage, its
parameters' copies looked up (:mod:`envs.pytorch.stages`). On a GPU, where an inference
takes milliseconds, building can cost more than timing. For each model (colocation
coarsening) two streams of distinct placements over ``cpu`` + ``cpu:bf16`` are built (the
streams of ``bench/bench_measure.py``: ``cold``, unrelated placements, and
``converging``, a local search's). Building needs no device time, so this runs anywhere.
Each stream is built twice, alternating per placement so a drift of a shared machine
hits both: without the stage cache, and with it (``StageCache``, 64 stages, the
default). Printed: milliseconds per placement of each, their ratio, and the share of
stages the cache held.
"""
from __future__ import annotations

import argparse
import time

from bench.bench_measure import cold_stream, converging_stream

__all__ = ["main"]


def main(argv=None) -> None:
    from envs.base import TimingConfig
    from envs.pytorch.devices import check_devices
    from envs.pytorch.stages import StageCache, TensorCache, build_placed
    from envs.backends import build_graph

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tv:resnet50,hf:distilbert,tv:convnext_tiny")
    ap.add_argument("--placements", type=int, default=30, help="placements per stream")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    devices = {d.name: d for d in check_devices(["cpu", "cpu:bf16"])}
    names = list(devices)
    size = TimingConfig().stage_cache
    print(f"{'model':<18}{'nodes':>6}{'fx ops':>8}  {'stream':<12}{'no cache ms':>12}{'cache ms':>10}"
          f"{'ratio':>8}{'stages held':>13}")
    for spec in args.models.split(","):
        program, _, graph, _ = build_graph(spec, "colocation", None, "torch")
        ops = sum(n.op == "call_function" for n in program.gm.graph.nodes)
        for stream_name, make in (("cold", cold_stream), ("converging", converging_stream)):
            tensors, stages = TensorCache(), StageCache(size)
            spent = {"none": 0.0, "cache": 0.0}
            for p in make(graph.num_nodes, args.placements, args.seed):
                affinity = graph.expand_placement({nm: names[int(d)] for nm, d in zip(graph.names, p)})
                for label, cache in (("none", None), ("cache", stages)):
                    start = time.perf_counter()
                    build_placed(program.gm, affinity, devices, tensors, cache)
                    spent[label] += time.perf_counter() - start
            n = args.placements
            held = stages.hits / max(1, stages.hits + stages.misses)
            print(f"{spec:<18}{graph.num_nodes:>6}{ops:>8}  {stream_name:<12}{spent['none'] / n * 1e3:>12.1f}"
                  f"{spent['cache'] / n * 1e3:>10.1f}{spent['none'] / spent['cache']:>7.2f}x{held:>13.0%}")


if __name__ == "__main__":
    main()
