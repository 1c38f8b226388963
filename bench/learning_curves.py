"""What a learning run gives the benchmarks' tables: its best after every measurement
(the curve), best/optimum after a budget, the measurements and seconds to a target,
its learning state per iteration, the shape of an optimum, and the markdown rows and
plots of many runs (``bench_learning.py`` and ``bench_methods.py`` print them)."""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Optional


def measured_curve(summary: dict) -> list[tuple[int, Optional[float], Optional[float]]]:
    """A run's best after every measurement, from its summary: ``(measurements, best
    latency so far or None, wall seconds from the run's start)`` (:func:`envs.measurer.best_curve`:
    cached repeats are not measurements; the seconds include the run's baselines and
    the method's planning and solving)."""
    from envs.measurer import best_curve

    times = list(summary.get("measured_at_s") or [])
    log = [{"ok": t is not None, "latency_s": t} for t in summary.get("latencies_s") or []]
    return [(r["measurement"], r["best_latency_s"], times[k] if k < len(times) else None)
            for k, r in enumerate(best_curve(log))]


def best_at(curve: list[tuple], budget: int, optimum: float) -> float:
    """best/optimum after ``budget`` measurements (a run that measured fewer: after all of
    its own), ``inf`` when nothing feasible was measured by then."""
    seen = [b for n, b, *_ in curve if n <= budget and b is not None]
    return min(seen) / optimum if seen else math.inf


#: the factor of the optimum the tables count measurements and seconds to
TARGET = 1.01


def to_target(curve: list[tuple], optimum: float, factor: float = TARGET) -> tuple[float, float]:
    """The measurements and the wall seconds after which a run's best was within ``factor``
    of ``optimum`` (``inf``, ``inf``: never within its measurements)."""
    for n, b, *rest in curve:
        if b is not None and b <= factor * optimum * (1 + 1e-9):
            wall = rest[0] if rest and rest[0] is not None else math.nan
            return float(n), float(wall)
    return math.inf, math.inf


def target_cells(curves: list[tuple]) -> tuple[str, str]:
    """Median over runs of the measurements and of the wall seconds to :data:`TARGET`
    times the optimum (a run that never got there counts as never: ``>N``, N the median
    measurements made, when fewer than half did), with ``(k/n runs)`` when not all did."""
    hits = [to_target(curve, opt) for curve, opt in curves]
    if not hits:
        return "-", "-"
    reached = sum(1 for n, _ in hits if math.isfinite(n))
    note = "" if reached == len(hits) else f" ({reached}/{len(hits)} runs)"
    med = statistics.median(n for n, _ in hits)
    if not math.isfinite(med):
        most = statistics.median([curve[-1][0] if curve else 0 for curve, _ in curves])
        return f">{most:.0f}{note}", "-"
    wall = statistics.median(w if math.isfinite(n) else math.inf for n, w in hits)
    return f"{med:.0f}{note}", (f"{wall:.1f}" if math.isfinite(wall) else "-") + note


def optimum_shape(graph, placement) -> dict:
    """What a grouping must express to reach a placement: its coarsened nodes, those off its
    main device (that must move), the connected pieces they form, and the placement."""
    import networkx as nx

    place = [int(d) for d in placement]
    main = max(set(place), key=place.count)
    moved = {k for k, d in enumerate(place) if d != main}
    g = nx.Graph()
    g.add_nodes_from(moved)
    g.add_edges_from((e.src, e.dst) for e in graph.edges
                     if e.src in moved and e.dst in moved and place[e.src] == place[e.dst])
    return {"nodes": len(place), "moved": len(moved), "placement": place,
            "pieces": nx.number_connected_components(g) if moved else 0}


def learning_state(summary: dict) -> list[tuple[int, Optional[float], Optional[float]]]:
    """A learned run's state per iteration, from its ``metrics.jsonl``: ``(measurements so
    far, the policy's entropy, its number of groups)`` (None where the method has none:
    a search without a policy, or a policy without a grouper)."""
    path = Path(summary["run_dir"]) / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] \
        if path.exists() else []
    return [(r.get("measurements"), r.get("entropy"), r.get("num_groups")) for r in rows]


def summarize(cases: list[dict], budgets: list[int]) -> list[str]:
    """One markdown row per case: median [min-max] of best/optimum after each budget's
    measurements, then the measurements and the wall seconds to :data:`TARGET`."""
    head = ("| model | accelerator | method | " + " | ".join(f"{b}" for b in budgets)
            + f" | measurements to {TARGET}x | wall s to {TARGET}x |")
    lines = [head, "|" + "---|" * (5 + len(budgets))]
    for c in cases:
        cells = []
        for b in budgets:
            r = [best_at(curve, b, opt) for curve, opt in c["curves"]]
            r += [x for x in c["ratios"] if math.isinf(x)]  # runs with nothing feasible
            cells.append(f"{statistics.median(r):.3f} [{min(r):.3f}-{max(r):.3f}]" if r else "-")
        cells += list(target_cells(c["curves"]))
        lines.append(f"| {c['model']} | {c['accelerator']} | {c['method']} | " + " | ".join(cells)
                     + " |" + ("" if c["proven"] else " (optimum not proven)"))
    return lines


def plot(cases: list[dict], path: str, budget: int) -> None:
    """Median best/optimum against measurements, one panel per (model, accelerator)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(c["model"], c["accelerator"]) for c in cases})
    methods = list(dict.fromkeys(c["method"] for c in cases))
    cols = min(4, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.8 * cols, 3.4 * rows), squeeze=False)
    xs = list(range(1, budget + 1))
    for ax, (model, acc) in zip(axes.flat, panels):
        top = 1.25
        for c in cases:
            if (c["model"], c["accelerator"]) != (model, acc) or not c["curves"]:
                continue
            k = methods.index(c["method"])  # one colour per method in every panel
            med = [statistics.median(best_at(cv, x, opt) for cv, opt in c["curves"]) for x in xs]
            ax.plot(xs, [m if math.isfinite(m) else float("nan") for m in med], label=c["method"],
                    color=plt.cm.tab20(k % 20), ls=("-", "--", ":")[k // 20 % 3])
            top = max([top] + [m for m in med if math.isfinite(m)])
        ax.axhline(1.01, ls="--", lw=0.8, color="grey")
        ax.set_title(f"{model} / {acc}", fontsize=9)
        ax.set_ylim(0.99, min(2.0, top * 1.02))
        ax.set_xscale("log")
        ax.set_xlabel("measurements", fontsize=8)
        ax.set_ylabel("best / optimum", fontsize=8)
        ax.legend(fontsize=6, ncol=2, loc="upper right")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
