"""Print a model's placement graph: ``python -m hsdag_ray.graph MODEL``.

Node and edge counts before and after coarsening and the op-type histogram::

    python -m hsdag_ray.graph resnet50
    python -m hsdag_ray.graph bert_base --coarsen openvino --out bert.json
    python -m hsdag_ray.graph path/to/model.xml
    python -m hsdag_ray.graph hf:gpt2 --backend torch    # the torch backend's graph (torch.export)
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from envs import backends
from hsdag_ray.cli import UsageError, run
from hsdag_core.coarsening import COARSENINGS
from hsdag_core.compgraph import parse_input_shapes
from hsdag_core.models import MODEL_HELP

__all__ = ["main"]


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m hsdag_ray.graph",
        description="Print a model's placement graph before and after coarsening.")
    ap.add_argument("model", help=MODEL_HELP)
    ap.add_argument("--coarsen", choices=COARSENINGS, default="colocation",
                    help="coarsening to report (default: colocation)")
    ap.add_argument("--input-shape", help="static input shape(s) for a dynamic file model, "
                    "e.g. 1,3,224,224 or input_ids:1,128;attention_mask:1,128")
    sources: dict[str, list[str]] = {}  # the graph each backend places, as its source says
    for kind in backends.BACKENDS.values():
        sources.setdefault(kind.graph.description, []).append(kind.name)
    ap.add_argument("--backend", choices=tuple(backends.BACKENDS), default="auto",
                    help="the graph the backend places: "
                    + "; ".join(f"{what} ({', '.join(names)})" for what, names in sources.items())
                    + " (default auto)")
    ap.add_argument("--source", help=argparse.SUPPRESS)
    ap.add_argument("--out", help="write the coarsened graph as JSON to this file")
    ap.add_argument("--top", type=int, default=15, help="op types to list (default 15)")
    args = ap.parse_args(argv)
    if args.source is not None:
        fits = [k.name for k in backends.BACKENDS.values() if k.real and k.graph.name == args.source]
        raise UsageError(f"--source is now --backend: use --backend {(fits or ['auto'])[0]} for the "
                         f"{args.source} graph")
    source = backends.graph_source(args.backend)
    model, fine, coarse, _ = source.build(args.model, args.coarsen, parse_input_shapes(args.input_shape))
    print(f"model {fine.name}: {source.size(model)}")
    print(f"  placeable graph: {fine.num_nodes} nodes, {len(fine.edges)} edges")
    print(f"  after {args.coarsen} coarsening: {coarse.num_nodes} nodes, {len(coarse.edges)} edges")
    print("  op types (placeable graph):")
    for t, c in fine.op_histogram().most_common(args.top):
        print(f"    {t:<28} {c}")
    if args.out:
        coarse.save(args.out)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main, prog="hsdag_ray.graph"))
