"""What a command prints while it works: one line per event, a progress bar, a final table.

By default a run's console reads like a tool's: what the libraries underneath
(torch, Ray, RLlib, W&B, OpenVINO) print goes to the run's ``libraries.log``
(:func:`libraries_to`), progress is a bar on a terminal and one line per
iteration otherwise (:class:`Progress`), and the run ends with a short table
(:func:`result_table`). ``--verbose`` leaves the libraries' output on the
console.
"""
from __future__ import annotations

import math
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

from envs.intervals import WITHIN_NOISE, compare, interval_ms

__all__ = ["say", "libraries_to", "Progress", "result_table", "print_result"]

#: where this process's own console output goes while the libraries' goes to a log
_OUT = None


def _console():
    from rich.console import Console

    if _OUT is not None:
        return Console(file=_OUT, highlight=False, soft_wrap=True)
    return Console(stderr=True, highlight=False, soft_wrap=True)


def say(quiet: bool) -> Callable[[str], None]:
    """A function printing one line to stderr (nothing when ``quiet``)."""
    if quiet:
        return lambda msg: None
    return lambda msg: _console().print(msg)


@contextmanager
def libraries_to(path: Optional[Path]) -> Iterator[None]:
    """Send everything printed on this process's stdout and stderr to the file
    ``path``, while this module's own output (:func:`say`, :class:`Progress`) still
    reaches the console (on stderr).

    The libraries underneath (torch's and torch-geometric's warnings, Ray's and
    RLlib's Python logs, the C++ log lines of Ray's core worker and HiGHS's stray
    debug lines, which no Python setting reaches) write to file descriptors 1 and
    2; both are pointed at ``path`` for the duration and restored after, so nothing
    they say is lost and the console reads like a tool's. Processes started
    meanwhile (a local Ray's) inherit the file. ``path=None`` changes nothing
    (``--verbose``).
    """
    global _OUT
    if path is None:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    _OUT = os.fdopen(os.dup(saved[1]), "w", buffering=1)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, old in zip((1, 2), saved):
            os.dup2(old, fd)
            os.close(old)
        _OUT.close()
        _OUT = None


def _ms(seconds: Optional[float]) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    return f"{seconds * 1e3:.3f} ms"


def reference_device(devices: Sequence[str]) -> str:
    """The device a run's speedups are quoted against: the CPU, else the first device
    (on the simulator, ``CPU_MODEL`` first)."""
    return "CPU" if "CPU" in devices else devices[0]


class Progress:
    """Progress of a run in placements (or ``unit``, another count of a metrics row):
    a bar on a terminal, else one line per iteration.

    ``update(row)`` takes a ``metrics.jsonl`` row (``placements``, ``measurements``,
    ``best_latency_s``, ``speedup_vs_cpu``, ``num_groups``,
    ``measurements_per_s``...).
    """

    def __init__(self, total: int, done: int, quiet: bool, reference: str = "CPU",
                 optimum_s: Optional[float] = None, unit: str = "placements",
                 optimum_label: str = "optimum") -> None:
        self.total, self.quiet, self.reference, self.unit = total, quiet, reference, unit
        self.optimum_label = optimum_label
        self.optimum_s = optimum_s if optimum_s and math.isfinite(optimum_s) else None
        self.bar = None
        if quiet:
            return
        self.console = _console()
        if self.console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self.bar = RichProgress(TextColumn(unit), BarColumn(), MofNCompleteColumn(),
                                    TimeElapsedColumn(), TextColumn("{task.description}"),
                                    console=self.console, transient=False)
            self.task = self.bar.add_task("", total=total, completed=min(done, total))
            self.bar.start()

    def _text(self, row: Mapping[str, Any]) -> str:
        best = row.get("best_latency_s")
        parts = [f"best {_ms(best)}"
                 + (f" ({best / self.optimum_s:.3f}x {self.optimum_label})"
                    if best and self.optimum_s else "")]
        if row.get("speedup_vs_cpu") is not None:
            parts.append(f"speedup vs {self.reference} {row['speedup_vs_cpu'] * 100:.1f}%")
        if row.get("num_groups") is not None:
            parts.append(f"groups {row['num_groups']:.1f}")
        parts.append(f"measured {row['measurements']}"
                     + (f" ({row['failures']} failed)" if row.get("failures") else ""))
        return "  ".join(parts)

    def update(self, row: Mapping[str, Any]) -> None:
        if self.quiet:
            return
        if self.bar is not None:
            self.bar.update(self.task, completed=min(row[self.unit], self.total),
                            description=self._text(row))
        else:
            self.console.print(f"iter {row['iteration']:>3}  {self.unit} "
                               f"{row[self.unit]:>4}/{self.total}  {self._text(row)}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def optimum_label(profile_measured: bool) -> str:
    """What the ``optimum`` baseline is called: the optimum where the run's profile is what
    is measured; elsewhere (a real machine, ``--sim-profile``) only the exact solver's
    placement on the profile, which the machine may run slower than a placement found."""
    return "optimum" if profile_measured else "exact on profile"


def result_table(summary: Mapping[str, Any]) -> Any:
    """The end of a run as a rich table: the run's best, every baseline, the speedups."""
    from rich.table import Table

    baselines = summary.get("baselines", {})
    ref = f"{reference_device(summary.get('devices') or ['CPU'])}_only"  # as the progress line's
    cpu = baselines.get(ref)
    table = Table(title=f"{summary['model']} / {summary['method']} / {summary['backend']}",
                  title_justify="left", show_edge=False)
    table.add_column("placement")
    # under the throughput objective a placement's figure is a pipeline's time per sample
    table.add_column("time per sample" if summary.get("objective") == "throughput" else "latency",
                     justify="right")
    # a re-measured run's figures carry 95% intervals (envs.intervals): a placement is
    # called faster or slower than the CPU only when the two intervals do not overlap
    rem = (summary.get("remeasured") or {}).get("candidates") or {}
    intervals = {k: v.get("interval_s") for k, v in rem.items()}
    if rem:
        table.add_column("95% interval", justify="right")
    table.add_column(f"vs {ref}", justify="right")

    def vs_cpu(v: Optional[float], iv=None) -> str:
        if v is None or cpu is None or not math.isfinite(v) or not math.isfinite(cpu):
            return "-"
        if rem and compare(iv, intervals.get(ref)) == WITHIN_NOISE:
            return WITHIN_NOISE
        return f"{(1 - v / cpu) * 100:.1f}% faster" if v <= cpu else f"{(v / cpu - 1) * 100:.1f}% slower"

    def cells(v: Optional[float], iv) -> list[str]:
        shown = "-" if not iv else interval_ms(iv) + " ms"
        return [_ms(v), *([shown] if rem else []), vs_cpu(v, iv)]

    source = summary.get("best_source", "learner")
    label = f"best found ({summary['method']})" if source == "learner" else f"best: {source}"
    best = summary.get("best_latency_s")
    table.add_row(label, *cells(best, summary.get("best_interval_s")), style="bold")
    for name, v in sorted(baselines.items(),
                          key=lambda kv: kv[1] if kv[1] is not None else math.inf):
        note = ""
        if name == "optimum" and summary.get("optimum_proven") is False:
            note = " (not proven)"
        shown = optimum_label(summary.get("profile_measured", True)) if name == "optimum" else name
        table.add_row(shown + note, *cells(v, intervals.get(name)))
    return table


def print_result(summary: Mapping[str, Any], quiet: bool) -> None:
    """The final table and where the outputs are, on stdout."""
    if quiet:
        return
    from rich.console import Console

    out = Console(file=sys.stdout, highlight=False, soft_wrap=True)
    out.print(result_table(summary))
    screened, suggested = summary.get("screened") or 0, summary.get("suggested") or 0
    guided = summary.get("guided_by") or []
    out.print(("guided (" + ", ".join(guided) + ")" if guided else "as published (no --guide)")
              + ("; the best is the guide's" if summary.get("best_from_guide") else ""))
    out.print(f"{summary['placements']} placements ({summary['measurements']} measured, "
              + (f"{suggested} of them the guide's, " if suggested else "")
              + (f"{screened} screened as slower, " if screened else "")
              + f"the others proposed before) in {summary['wall_s']:.0f} s; "
              f"outputs in {summary['run_dir']}")
