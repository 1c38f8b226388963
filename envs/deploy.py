"""What applying a placement shares across graph sources: the job, the rows of its table.

``python -m hsdag_ray.apply`` reads the placement onto the backend's graph and hands an
:class:`ApplyJob` to the graph source (:meth:`envs.source.GraphSource.apply`), which
compiles the placement, times it next to each device alone and its own rows
(interleaved over ``rounds``: :func:`interleave`, pooled: :func:`combine`), checks its
outputs (:func:`output_error`) and saves it; every row says whether the placement is
faster, slower or within the noise of it (:func:`versus`).
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np

from envs.base import Measurement, TimingConfig, summarize_times
from envs.intervals import compare, half_width, median_interval

__all__ = ["ApplyJob", "SaveError", "output_error", "row", "staged", "versus", "combine", "interleave",
           "result_head"]


class SaveError(RuntimeError):
    """The placed model could not be saved or loaded back (one sentence)."""


@dataclass
class ApplyJob:
    """One placement to apply: what the command read, checked and built.

    Attributes:
        model_name: ``--model`` as given; placement_file: ``--placement`` as given.
        backend: the ``--backend`` name; specs: the device specs; names: their names;
        described: one line per device.
        model, graph: the model and its fine graph from the backend's graph source.
        placement: node name -> device name; counts: nodes per device.
        timing, rounds, seed, save: ``--precision`` and the timing flags, ``--rounds``,
        ``--seed``, ``--save`` (None: nothing saved).
    """

    model_name: str
    placement_file: str
    backend: str
    specs: list[str]
    names: list[str]
    described: list[str]
    model: Any
    graph: Any
    placement: dict[str, str]
    counts: Counter
    timing: TimingConfig
    rounds: int = 1
    seed: int = 0
    save: Optional[str] = None


def result_head(job: ApplyJob, placed: Measurement) -> dict[str, Any]:
    """The ``apply.json`` fields every graph source writes, before the rows are timed."""
    t = job.timing
    return {"model": job.model_name, "placement_file": job.placement_file, "devices": job.specs,
            "described_devices": job.described, "backend": job.backend,
            "nodes_per_device": {d: job.counts[d] for d in job.names if job.counts[d]},
            "timing": {"warmup": t.warmup, "repeats": t.repeats, "block": t.block,
                       "block_s": t.block_s, "precision": t.precision, "precision_cap_s": t.precision_cap_s,
                       "threads": t.threads, "rounds": job.rounds}, "seed": job.seed,
            "placed": row("placement", placed), "single": {}, "own": {}, "saved": None}


def output_error(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> tuple[float, float]:
    """Max abs error and relative error (max abs error / max abs reference) over all outputs."""
    max_abs = max_rel = 0.0
    for out, ref in zip(outputs, reference):
        if ref.dtype.kind != "f":
            err = float(np.count_nonzero(out != ref))
            max_abs, max_rel = max(max_abs, err), (math.inf if err else max_rel)
            continue
        err = float(np.max(np.abs(out.astype(np.float64) - ref))) if ref.size else 0.0
        scale = float(np.max(np.abs(ref))) if ref.size else 0.0
        max_abs, max_rel = max(max_abs, err), max(max_rel, err / max(scale, 1e-12))
    return max_abs, max_rel


def row(name: str, m: Measurement) -> dict[str, Any]:
    return {"name": name, **m.to_dict()}


def staged(r: dict[str, Any]) -> dict[str, Any]:
    """Say in the row's ``info["how"]`` that it ran as stages: its path and stage count."""
    info = r["info"]
    if r["ok"]:
        n = info.get("stages")
        info["how"] = f"{info.get('path', '')}, {n} stage" + ("s" if n != 1 else "")
    return r


def versus(r: dict[str, Any], placed: Measurement) -> None:
    """Add to a row the placement's speed-up over it and the comparison's words: the
    placement is ``faster``/``slower`` than the row only when their 95% intervals do not
    overlap, else ``within the noise`` (:func:`envs.intervals.compare`)."""
    ok = r["ok"] and placed.ok
    r["placement_speedup"] = (r["latency_s"] / placed.latency_s) if ok else None
    r["placement_is"] = compare(placed.interval_s, r.get("interval_s")) if ok else None


def combine(rounds: Sequence[Measurement]) -> Measurement:
    """One measurement from several rounds: all samples pooled (the first failure if any)."""
    failed = [m for m in rounds if not m.ok]
    if failed:
        return failed[0]
    samples = [t for m in rounds for t in m.samples_s]
    latency, spread = summarize_times(samples)
    info = {**rounds[0].info, "rounds": len(rounds)}
    each = [m.info["precision"] for m in rounds if isinstance(m.info.get("precision"), dict)]
    if each:  # the pooled interval's precision; capped when a round's cap stopped it short
        reached = half_width(latency, median_interval(samples)[:2])
        info["precision"] = {**each[0], "reached": reached, "blocks": len(samples),
                             "capped": any(p["capped"] for p in each) and reached > each[0]["target"]}
    return Measurement(ok=True, latency_s=latency, spread=spread, runs=sum(m.runs for m in rounds),
                       backend=rounds[0].backend, samples_s=samples, info=info)


def interleave(jobs: dict[str, Callable[[], Measurement]], placed: Measurement,
               n: int) -> dict[str, list[Measurement]]:
    """Each job's measurements over ``n`` rounds, ``placed`` being the placement's first."""
    rounds: dict[str, list[Measurement]] = {key: [] for key in jobs}
    rounds["placement"].append(placed)
    for r in range(n):  # interleaved, so a slow spell of the machine hits every run alike
        for key, job in jobs.items():
            if len(rounds[key]) <= r:
                rounds[key].append(job())
    return rounds
