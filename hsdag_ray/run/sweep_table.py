"""A sweep's table from its finished trials, and what it says about the unfinished ones.

:func:`failed_trials` names the trials Ray Tune reports as failed; :func:`gather`
reads the run folders' summaries into ``results.csv`` rows
(:func:`hsdag_ray.run.results.rows_from_summary`) and says why each missing trial is
missing; :func:`mark_partial` puts that list at the top of ``results.md``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

__all__ = ["failed_trials", "gather", "mark_partial"]


def failed_trials(result_grid) -> set[str]:
    """Names of the trials Ray Tune reports as failed (its ``ResultGrid``)."""
    names = set()
    for i in range(len(result_grid)):
        r = result_grid[i]
        if r.error is not None:
            names.add((r.config or {}).get("trial", {}).get("name", "?"))
    return names


def gather(grid: Sequence[dict[str, Any]], runs: Path, errored: set[str]
           ) -> tuple[list[dict], list[dict], list[str], dict[str, str]]:
    """The rows and summaries of the trials of ``grid`` that finished (their run folders
    under ``runs`` hold a summary), the names of those that did not, and why each did
    not (``errored``: the trials Ray Tune reports as failed)."""
    from hsdag_ray.run.results import load_summary, rows_from_summary

    rows, summaries, missing, why = [], [], [], {}
    for t in grid:
        s = load_summary(runs / t["name"])
        if s is None:
            missing.append(t["name"])
            why[t["name"]] = ("failed (its libraries.log says why)" if t["name"] in errored
                              else "stopped before it finished; it continues from its last checkpoint"
                              if Path(runs / t["name"] / "checkpoints").is_dir() else "not started")
            continue
        rows.append(rows_from_summary(s, t["variant"]))
        summaries.append(s)
    return rows, summaries, missing, why


def mark_partial(folder: Path, total: int, missing: dict[str, str]) -> None:
    """Say at the top of ``results.md`` (written with the finished trials, or alone when
    none finished) that the table is partial, and which trials it lacks and why."""
    md = folder / "results.md"
    lines = md.read_text().splitlines() if md.is_file() else []
    at = 1 if lines and lines[0].startswith("#") else 0  # after the title
    note = ["", f"**Partial results: {len(missing)} of {total} trials are missing** (run the same "
            "sweep command again to complete them):", ""]
    note += [f"- {name}: {why}" for name, why in missing.items()]
    md.write_text("\n".join(lines[:at] + note + ([""] if lines[at:] else []) + lines[at:]).strip() + "\n")
