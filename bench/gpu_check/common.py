"""What every section of the GPU check shares: the report, timing settings, graphs built
once, profiles, the release of GPU memory, and figures with their intervals."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

__all__ = ["Report", "say", "timing", "graphs", "profile", "release", "ms", "verdict",
           "remeasure_until"]


class Report:
    """The check's figures, written as JSON and markdown after every section, so a run
    stopped early keeps what it measured."""

    def __init__(self, out: Path) -> None:
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.data: dict[str, Any] = {"sections": {}, "verdicts": {}}
        self.md: list[str] = []

    def section(self, name: str, figures: Any, lines: Sequence[str], verdict: str) -> None:
        self.data["sections"][name] = figures
        self.data["verdicts"][name] = verdict
        self.md += list(lines) + ["", f"**Verdict ({name}):** {verdict}", ""]
        self.write()

    def write(self) -> None:
        (self.out / "gpu_check.json").write_text(json.dumps(self.data, indent=1, default=float))
        (self.out / "gpu_check.md").write_text("\n".join(self.md) + "\n")


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def timing(repeats: int = 4, block: int = 1, warmup: int = 1, cap_s: float = 0.5,
           precision: Optional[float] = None):
    """Timing of the check: a short warm-up that goes on until two runs agree (unraced),
    then at least ``repeats`` blocks, more until the interval of their median is within
    the default precision (``TimingConfig.precision``) or ``cap_s`` seconds of blocks
    stop them (hundreds of blocks of a GPU's millisecond runs; the check's sections
    time many placements, so a noisy CPU standing in for the GPU stops there too);
    re-measurements pool the blocks of interleaved rounds. ``precision`` replaces the
    default precision (0: exactly ``repeats`` blocks, as the scaled-down check times on a
    CPU standing in for the GPU)."""
    from envs.base import TimingConfig

    return TimingConfig(warmup=warmup, warmup_agree=0.1, warmup_max=3, repeats=repeats, block=block,
                        precision_cap_s=cap_s, timeout_s=60.0, threads=0,
                        **({} if precision is None else {"precision": precision}))


_BUILT: dict[str, tuple] = {}


def graphs(spec: str):
    """The program, fine and coarse (colocation) graphs of ``spec``, exported once per run."""
    from envs.backends import build_graph
    from hsdag_core.coarsening import coarsen

    if spec not in _BUILT:
        program, fine, _, _ = build_graph(spec, "none", None, "torch")
        _BUILT[spec] = (program, fine, coarsen(fine, "colocation")[0])
    return _BUILT[spec]


def profile(spec: str, devices: list[str], fit: int, timing_config):
    """A torch profile of ``spec`` on ``devices`` (per-node times, link costs fitted to
    ``fit`` real splits)."""
    from envs.profiling import record

    program, fine, _ = graphs(spec)
    return record(spec, devices, fit=fit, timing=timing_config, progress=False, backend="torch",
                  built=(program, fine))


def release() -> None:
    """Free what a section left on the GPU (cached copies of parameters), so the next
    memory cap starts from an empty allocator."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def ms(v: Optional[float]) -> str:
    return "-" if v is None or not np.isfinite(v) else f"{v * 1e3:.2f}"


def verdict(met: bool, what: str, by: str) -> str:
    """One line: ``met`` or ``not met``, what the aim was, and by how much."""
    return f"{'met' if met else 'not met'}: {what} ({by})"


def remeasure_until(measure, candidates: dict, rounds: int, least: int = 2,
                    tight: Optional[float] = None) -> dict:
    """Re-measure ``candidates`` (name -> placement) in interleaved rounds, as
    :func:`envs.measuring_service.remeasure` does (round ``r`` in an order rotated by ``r``), but
    stop after ``least`` rounds once every candidate's 95% interval is within ``tight`` of
    its median (half-width over median; default ``TimingConfig.precision``): a quiet
    machine spends fewer rounds. Returns per
    name ``ok``, ``latency_s`` (the pooled blocks' median), ``interval_s``,
    ``half_width``, ``rounds``, ``error`` and ``capped`` (a round's time cap stopped it and
    the pooled interval is still wider than ``tight``)."""
    from envs.base import TimingConfig
    from envs.intervals import interval_fields

    tight = TimingConfig().precision if tight is None else tight
    names = list(candidates)
    pooled: dict[str, list[float]] = {n: [] for n in names}
    errors: dict[str, Optional[str]] = {n: None for n in names}
    capped: dict[str, bool] = {n: False for n in names}
    done = 0
    for r in range(max(1, rounds)):
        for name in names[r % len(names):] + names[: r % len(names)]:
            if errors[name] is None:
                m = measure(candidates[name])
                if m.ok:
                    pooled[name] += list(m.samples_s)
                    capped[name] |= bool((m.info.get("precision") or {}).get("capped"))
                else:
                    errors[name] = f"{m.stage}: {m.error}"
        done = r + 1
        fields = {n: interval_fields(pooled[n]) for n in names if errors[n] is None}
        if done >= least and all(f["half_width"] is not None and f["half_width"] <= tight
                                 for f in fields.values()):
            break
    out = {}
    for name in names:
        if errors[name] is not None or not pooled[name]:
            out[name] = {"ok": False, "latency_s": None, "interval_s": None, "half_width": None,
                         "rounds": done, "error": errors[name]}
            continue
        f = interval_fields(pooled[name])
        out[name] = {"ok": True, "latency_s": f["median_s"], "interval_s": f["interval_s"],
                     "half_width": f["half_width"], "rounds": done, "error": None,
                     "capped": capped[name] and (f["half_width"] or 0.0) > tight}
    return out
