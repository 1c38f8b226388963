"""The comparison table of many runs: ``results.csv``, ``results.md`` and ``results.png``.

Every figure is read from the runs' ``summary.json`` (written by
:func:`hsdag_ray.run.training.train`); nothing is measured or solved again here.

One row per run (``kind: run``) and, per model, one row per baseline the runs
were compared with (``kind: baseline``: each single device, OpenVINO AUTO and HETERO's
own splits (``hetero_auto``, ``hetero_pipeline``) when real devices were used, the
exact optimum; a baseline OpenVINO could not run has ``best_source`` ``failed: why``). A run's ``best_latency_s`` is its
method's own best (``method_best_latency_s`` of the summary: re-measured with a
real backend), not the fastest single device the run falls back to when the
method did not beat it; that one stays in ``run_best_latency_s``.

The markdown table, like the paper's: per model, method and guide mode (as
published, or guided: ``train --guide``) the best latency (median over seeds,
with the range min-max), the speedup over CPU-only, the ratio to the exact
optimum (``*`` when the solver did not prove it optimal), the measurements each
run needed to come within 1.05x and 1.01x of the best known placement of the
model (the fastest any run or baseline measured) and the wall seconds to 1.01x
(from the run's start, planning and solving included: the summary's
``measured_at_s``), the measurements used and the wall time (medians). The figure
draws the final ratios as bars and, per model, each method's median best after
every measurement against measurements, with the 1.01x line.
"""
from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

__all__ = ["COLUMNS", "TARGETS", "cell", "rows_from_summary", "baseline_rows", "measurements_to",
           "add_targets", "write_csv", "read_csv", "markdown", "plot", "write_all"]

COLUMNS = ("kind", "model", "method", "variant", "guide", "seed", "backend", "devices",
           "best_latency_s", "run_best_latency_s", "best_source", "cpu_only_s", "speedup_vs_cpu",
           "optimum_s", "optimum_proven", "ratio_to_optimum", "best_known_s", "to_1.05x",
           "to_1.01x", "wall_to_1.01x", "placements", "measurements", "failures", "wall_s", "measured_by", "run_dir")
#: the factors of the best known placement the table counts measurements to
TARGETS = (1.05, 1.01)


def cell(values: Sequence[float], fmt: str = "{:.3f}") -> str:
    """Median of ``values`` with their range (min-max) when they differ; ``-`` when none."""
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not vals:
        return "-"
    if all(math.isinf(v) for v in vals):
        return "no feasible"
    med = statistics.median(vals)
    lo, hi = min(vals), max(vals)
    text = fmt.format(med) if math.isfinite(med) else "inf"
    sep = " to " if lo < 0 else "-"  # "-66.7%--56.1%" would not read
    return text + (f" ({fmt.format(lo)}{sep}{fmt.format(hi)})" if hi > lo else "")


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    if a is None or b is None or not math.isfinite(b) or b <= 0:
        return None
    return a / b


def _vs_cpu(s: dict[str, Any]) -> Optional[str]:
    """How a re-measured run's best compares with the CPU alone, by their 95% intervals."""
    from envs.intervals import compare

    cpu = ((s.get("remeasured") or {}).get("candidates") or {}).get("CPU_only") or {}
    if not s.get("best_interval_s") or not cpu.get("interval_s"):
        return None
    return compare(s["best_interval_s"], cpu["interval_s"])


def rows_from_summary(s: dict[str, Any], variant: str = "") -> dict[str, Any]:
    """The ``results.csv`` row of one run's summary."""
    base = s.get("baselines") or {}
    best = s.get("method_best_latency_s")
    cpu = base.get("CPU_only")
    opt = base.get("optimum")
    return {"kind": "run", "model": s["model"], "method": s["method"], "variant": variant,
            "guide": "guided" if s.get("guided_by") else "as published",
            "latencies_s": list(s.get("latencies_s") or []),
            "measured_at_s": list(s.get("measured_at_s") or []),
            "seed": s.get("seed"), "backend": s.get("backend"), "devices": ",".join(s.get("devices", [])),
            "best_latency_s": best, "run_best_latency_s": s.get("best_latency_s"),
            "best_source": s.get("best_source"), "cpu_only_s": cpu,
            # the re-measured best against the CPU: faster or slower only when the 95%
            # intervals do not overlap (envs.intervals), else "within the noise"
            "vs_cpu": _vs_cpu(s),
            "speedup_vs_cpu": (1 - best / cpu) if best is not None and cpu and math.isfinite(cpu) else None,
            "optimum_s": opt, "optimum_proven": s.get("optimum_proven") if opt is not None else None,
            "ratio_to_optimum": _ratio(best, opt), "placements": s.get("placements"),
            "measurements": s.get("measurements"), "failures": s.get("failures"),
            "wall_s": s.get("wall_s"), "run_dir": s.get("run_dir"),
            # measurements per machine: "address=count" separated by spaces
            "measured_by": " ".join(f"{m}={k}" for m, k in (s.get("measured_by") or {}).items()) or None}


def _per_machine(rows: Sequence[dict[str, Any]]) -> str:
    """The sentence under the table that gives the measurements each machine made over
    all runs (``""`` when the runs name no machine)."""
    total: dict[str, int] = {}
    for r in rows:
        for part in str(r.get("measured_by") or "").split():
            machine, _, k = part.rpartition("=")
            total[machine] = total.get(machine, 0) + int(float(k))
    if not total:
        return ""
    return ("Measurements per machine, all runs: "
            + ", ".join(f"{m} {k}" for m, k in sorted(total.items())) + ".\n")


def baseline_rows(runs: Sequence[dict[str, Any]], summaries: Sequence[dict[str, Any]]) -> list[dict]:
    """Per model, one row per baseline of its runs (median over the runs: the simulator's
    are identical; re-measured real ones differ a little from run to run)."""
    by_model: dict[str, list[tuple[dict, dict]]] = {}
    for r, s in zip(runs, summaries):
        by_model.setdefault(r["model"], []).append((r, s))
    out = []
    for model, pairs in by_model.items():
        names: list[str] = []
        for _, s in pairs:
            names += [n for n in (s.get("baselines") or {}) if n not in names]
        for name in names:
            vals = [s["baselines"][name] for _, s in pairs if s.get("baselines", {}).get(name) is not None]
            if not vals:
                continue
            t = statistics.median(vals)
            why = next((s["baselines_failed"][name] for _, s in pairs
                        if name in (s.get("baselines_failed") or {})), None)
            cpu = statistics.median([r["cpu_only_s"] for r, _ in pairs if r["cpu_only_s"]] or [math.nan])
            opt = statistics.median([r["optimum_s"] for r, _ in pairs if r["optimum_s"]] or [math.nan])
            proven = all(r["optimum_proven"] is not False for r, _ in pairs)
            method = {"optimum": f"optimum ({pairs[0][1].get('optimum_method', 'exact')})",
                      "openvino_auto": "OpenVINO AUTO",
                      "accelerate_auto": "Accelerate device_map=auto",
                      "hetero_auto": "OpenVINO HETERO (default)",
                      "hetero_pipeline": "OpenVINO HETERO pipeline"}.get(name, name.replace("_only", " only"))
            out.append({c: None for c in COLUMNS} | {
                "kind": "baseline", "model": model, "method": method, "variant": "",
                "backend": pairs[0][0]["backend"], "devices": pairs[0][0]["devices"],
                "best_latency_s": t, "cpu_only_s": cpu if math.isfinite(cpu) else None,
                "speedup_vs_cpu": (1 - t / cpu) if math.isfinite(cpu) and math.isfinite(t) else None,
                "optimum_s": opt if math.isfinite(opt) else None,
                "optimum_proven": proven if math.isfinite(opt) else None,
                "ratio_to_optimum": _ratio(t, opt if math.isfinite(opt) else None),
                "measurements": 0}
                | ({"best_latency_s": None, "speedup_vs_cpu": None, "ratio_to_optimum": None,
                    "best_source": f"failed: {why}"} if why and not math.isfinite(t) else {}))
    return out


def measurements_to(latencies_s: Sequence[Optional[float]], target_s: float) -> Optional[int]:
    """The number of measurements after which the best so far is at most ``target_s``
    (None: never within these)."""
    best = math.inf
    for k, t in enumerate(latencies_s, 1):
        if t is not None and t < best:
            best = t
        if best <= target_s:
            return k
    return None


def add_targets(rows: Sequence[dict[str, Any]]) -> None:
    """Give every run row the best known latency of its model (the fastest any run or
    baseline of the model measured) and the measurements it needed to come within each
    of :data:`TARGETS` of it."""
    known: dict[str, float] = {}
    for r in rows:
        for t in (r.get("best_latency_s"), r.get("optimum_s")):
            if t is not None and math.isfinite(t):
                known[r["model"]] = min(known.get(r["model"], math.inf), t)
    for r in rows:
        ref = known.get(r["model"])
        r["best_known_s"] = ref
        if r["kind"] != "run" or ref is None:
            continue
        for f in TARGETS:
            r[f"to_{f}x"] = measurements_to(r.get("latencies_s") or [], f * ref * (1 + 1e-9))
        # the seconds from the run's start to the end of that measurement (train's curve.jsonl)
        n, times = r.get("to_1.01x"), r.get("measured_at_s") or []
        r["wall_to_1.01x"] = times[n - 1] if n is not None and n <= len(times) else None


def _to_cell(rs: Sequence[dict[str, Any]], key: str) -> str:
    """Median measurements to a target over runs; a run that never got there counts as
    its measurements, shown with ``>``; ``n/m`` runs got there when not all did."""
    if not rs:
        return "-"
    vals = [r[key] if r.get(key) is not None else math.inf for r in rs]
    med = statistics.median(vals)
    reached = sum(1 for v in vals if math.isfinite(v))
    text = f"{med:.0f}" if math.isfinite(med) else f">{statistics.median([r['measurements'] or 0 for r in rs]):.0f}"
    return text + (f" ({reached}/{len(rs)} runs)" if reached < len(rs) else "")


def write_csv(rows: Iterable[dict[str, Any]], path: Path) -> None:
    with Path(path).open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in COLUMNS})


def read_csv(path: Path) -> list[dict[str, Any]]:
    """``results.csv`` back as dicts (numbers as floats, empty cells as None)."""
    out = []
    with Path(path).open() as f:
        for r in csv.DictReader(f):
            row: dict[str, Any] = {}
            for k, v in r.items():
                if v == "":
                    row[k] = None
                elif v in ("True", "False"):
                    row[k] = v == "True"
                else:
                    try:
                        row[k] = float(v)
                    except ValueError:
                        row[k] = v
            out.append(row)
    return out


def _label(r: dict[str, Any]) -> str:
    guided = " (guided)" if r.get("guide") == "guided" else ""
    return r["method"] + (f" [{r['variant']}]" if r.get("variant") else "") + guided


def _groups(rows: Sequence[dict[str, Any]]) -> dict[tuple[str, str], list[dict]]:
    g: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        g.setdefault((r["model"], _label(r)), []).append(r)
    return g


def markdown(rows: Sequence[dict[str, Any]], title: str = "") -> str:
    """The comparison table (see the module docstring) as markdown."""
    lines = [f"## {title}", ""] if title else []
    seeds = sorted({int(r["seed"]) for r in rows if r["kind"] == "run" and r.get("seed") is not None})
    lines += [f"Best latency: median over seeds {', '.join(map(str, seeds))} (min-max); the "
              "method's own best. Ratio to the exact optimum: `*` = the solver did not prove it "
              "optimal. To 1.05x / 1.01x: measurements until the run's best was within that "
              "factor of the best known placement of the model (median; `>` never). "
              "Measurements and wall time: medians per run. Guide: as published, or guided "
              "(`train --guide`: the exact-solver start, HSDAG's incumbent prior, untried "
              "neighbours of the best). s to 1.01x: the wall seconds from the run's start (its "
              "baselines, the method's planning and solving, every measurement) until then, "
              "median over the runs that got there.", "",
              "| model | method | guide | best latency (ms) | speedup vs CPU | ratio to optimum "
              "| to 1.05x | to 1.01x | s to 1.01x | measurements | wall (s) | runs |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (model, label), rs in _groups(rows).items():
        unproven = any(r.get("optimum_proven") is False for r in rs)
        ratio = cell([r["ratio_to_optimum"] for r in rs])
        runs = [r for r in rs if r["kind"] == "run"]
        method = rs[0]["method"] + (f" [{rs[0]['variant']}]" if rs[0].get("variant") else "")
        latency = cell([r['best_latency_s'] * 1e3 if r['best_latency_s'] is not None else None for r in rs])
        why = next((r["best_source"] for r in rs if r["kind"] == "baseline"
                    and str(r.get("best_source") or "").startswith("failed: ")), None)
        if why and latency == "-":   # a baseline OpenVINO could not run here, and why
            latency = " ".join(why.replace("|", "/").split())
        noise = bool(runs) and all(r.get("vs_cpu") == "within the noise" for r in runs)
        lines.append(
            f"| {model} | {method} | {runs[0].get('guide') or '-' if runs else '-'} | {latency} "
            f"| {cell([r['speedup_vs_cpu'] * 100 if r['speedup_vs_cpu'] is not None else None for r in rs], '{:.1f}%')}"
            f"{' (within the noise)' if noise else ''} "
            f"| {ratio}{' *' if unproven and ratio != '-' else ''} "
            f"| {_to_cell(runs, 'to_1.05x')} | {_to_cell(runs, 'to_1.01x')} "
            f"| {cell([r.get('wall_to_1.01x') for r in runs], '{:.1f}') if runs else '-'} "
            f"| {cell([r['measurements'] for r in runs], '{:.0f}') if runs else '-'} "
            f"| {cell([r['wall_s'] for r in runs], '{:.1f}') if runs else '-'} "
            f"| {len(runs) if runs else 'baseline'} |")
    machines = _per_machine([r for r in rows if r["kind"] == "run"])
    return "\n".join(lines) + "\n" + ("\n" + machines if machines else "")


def plot(rows: Sequence[dict[str, Any]], path: Path, title: str = "") -> None:
    """Per model, the best latency of each method and baseline relative to the exact
    optimum (to CPU-only where there is none): median bar, min-max whisker."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    models = list(dict.fromkeys(r["model"] for r in rows))
    width = max(5.0, 2.2 + 0.6 * len(_groups(rows)) / max(len(models), 1))
    fig, axes = plt.subplots(2, len(models), figsize=(width * len(models), 8.4), squeeze=False)
    for ax, model in zip(axes[1], models):
        _curves(ax, [r for r in rows if r["model"] == model and r["kind"] == "run"])
    for ax, model in zip(axes[0], models):
        groups = {k[1]: v for k, v in _groups(rows).items() if k[0] == model}
        with_opt = any(r["optimum_s"] for rs in groups.values() for r in rs)
        ref_name = "optimum" if with_opt else "CPU only"
        labels, med, lo, hi, colors = [], [], [], [], []
        for label, rs in groups.items():
            vals = [r["best_latency_s"] / (r["optimum_s"] if with_opt else r["cpu_only_s"])
                    for r in rs if r["best_latency_s"] is not None
                    and (r["optimum_s"] if with_opt else r["cpu_only_s"])]
            vals = [v for v in vals if math.isfinite(v)]
            if not vals:
                continue
            m = statistics.median(vals)
            labels.append(label)
            med.append(m)
            lo.append(m - min(vals))
            hi.append(max(vals) - m)
            colors.append("0.6" if rs[0]["kind"] == "baseline" else "C0")
        x = np.arange(len(labels))
        ax.bar(x, med, color=colors, yerr=[lo, hi], capsize=3)
        ax.axhline(1.0, color="C3", lw=1, ls="--")
        ax.set_xticks(x, labels, rotation=35, ha="right", fontsize=8)
        ax.set_ylabel(f"best latency / {ref_name}")
        ax.set_title(model)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _curves(ax, runs: Sequence[dict[str, Any]]) -> None:
    """Each method's median best-so-far (over its runs) / the model's best known latency
    against measurements; guided runs dashed."""
    import numpy as np

    groups: dict[str, list[dict]] = {}
    for r in runs:
        groups.setdefault(_label(r), []).append(r)
    for k, (label, rs) in enumerate(groups.items()):
        ref = rs[0].get("best_known_s")
        curves = [np.minimum.accumulate([t if t is not None else math.inf for t in r["latencies_s"]])
                  for r in rs if r.get("latencies_s") and ref]
        if not curves:
            continue
        n = max(len(c) for c in curves)
        padded = np.array([np.concatenate([c, np.full(n - len(c), c[-1])]) for c in curves]) / ref
        ax.plot(np.arange(1, n + 1), np.median(padded, axis=0), label=label,
                color=f"C{k % 10}", ls="--" if rs[0].get("guide") == "guided" else "-")
    ax.axhline(1.0, color="0.5", lw=1, ls=":")
    ax.axhline(1.01, color="0.5", lw=0.8, ls="--")  # the table's "to 1.01x"
    ax.set_xscale("log")
    ax.set_ylim(0.98, 1.6)
    ax.set_xlabel("measurements")
    ax.set_ylabel("best so far / best known (median)")
    ax.legend(fontsize=7)


def write_all(runs: Sequence[dict[str, Any]], summaries: Sequence[dict[str, Any]], folder: Path,
              title: str = "") -> list[dict[str, Any]]:
    """Write ``results.csv``, ``results.md`` and ``results.png`` in ``folder``; return the rows."""
    folder = Path(folder)
    rows = list(runs) + baseline_rows(runs, summaries)
    add_targets(rows)
    write_csv(rows, folder / "results.csv")
    (folder / "results.md").write_text(markdown(rows, title))
    plot(rows, folder / "results.png", title)
    return rows


def load_summary(run_dir: Path) -> Optional[dict[str, Any]]:
    """A run folder's ``summary.json``, or None when the run did not finish."""
    f = Path(run_dir) / "summary.json"
    return json.loads(f.read_text()) if f.is_file() else None
