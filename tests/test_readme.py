"""The README's main command, run exactly as a new user runs it.

A green suite once hid a main command that crashed at its first checkpoint:
every other test passes an absolute ``--out``, the user passes nothing. So
these tests read the command from the README, run it verbatim as a subprocess
in an empty folder, check what the README promises (the outputs, a console
that reads like a tool's), and continue the run from its relative folder.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
#: library noise that must not reach a default run's console
NOISE = ("Traceback", "Warning", "warnings.warn", "deprecat", "core_worker", "gputil",
         "Token authentication", "RAY_AUTH_MODE", "INFO", "logging.cc")


def readme_commands() -> tuple[str, str]:
    """(main command, test command): the parts after ``&&`` of the set-up block's lines."""
    block = README.split("## Set-up and the two commands", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    lines = [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    assert len(lines) == 2, lines
    main, tests = (ln.split("&&", 1)[1].strip() for ln in lines)
    return main, tests


def run_shell(command: str, cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    # `python` is this interpreter, whatever else is on PATH
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return subprocess.run(command, shell=True, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_readme_names_the_two_commands():
    main, tests = readme_commands()
    assert main == "python -m hsdag_ray.train"
    assert tests == 'python -m pytest -m "not slow" -n 2'
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install -q -e ".[test]" && python -m pytest -m "not slow" -n 2' in ci


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """The README's main command in an empty folder; (folder, result, run folder)."""
    main, _ = readme_commands()
    cwd = tmp_path_factory.mktemp("user")
    r = run_shell(main, cwd)
    runs = sorted((cwd / "runs").glob("*")) if (cwd / "runs").is_dir() else []
    return cwd, r, runs[0] if runs else None


def test_main_command_verbatim_writes_every_output(default_run):
    cwd, r, run = default_run
    assert r.returncode == 0, r.stderr[-3000:]
    assert run is not None and run.parent == cwd / "runs"
    for f in ("config.json", "metrics.jsonl", "best_placement.json", "summary.json",
              "learning_curve.png", "placement.png", "checkpoint", "wandb"):
        assert (run / f).exists(), f
    assert list((run / "wandb").glob("offline-run-*"))
    s = json.loads((run / "summary.json").read_text())
    assert s["best_latency_s"] > 0 and s["placements"] >= 500
    assert Path(s["run_dir"]).is_absolute() and Path(s["run_dir"]) == run.resolve()
    for k in ("model", "method", "backend", "objective", "devices", "best_latency_s", "baselines",
              "speedup_vs_cpu", "measurements", "wall_s"):
        assert k in s, k
    # the best is never worse than CPU-only, and the speed-up is read off the two
    assert s["best_latency_s"] <= s["baselines"]["CPU_only"]
    assert s["speedup_vs_cpu"] == pytest.approx(1 - s["best_latency_s"] / s["baselines"]["CPU_only"])
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == list(range(1, len(rows) + 1))
    assert s["measurements"] == rows[-1]["measurements"]
    assert all(r["num_groups"] and r["num_groups"] >= 1 for r in rows)
    # the best placement names every op of the model, on the run's devices
    from hsdag_core.models import load_model

    ops = {op.get_friendly_name() for op in load_model(s["model"]).get_ordered_ops()}
    best = json.loads((run / "best_placement.json").read_text())
    assert set(best) == ops and set(best.values()) <= set(s["devices"])


def test_main_command_console_reads_like_a_tool(default_run):
    _, r, run = default_run
    console = r.stdout + r.stderr
    for word in NOISE:
        assert word not in console, f"{word!r} on the console:\n{console}"
    # the final table: the run's best, the baselines, the optimum, where the outputs are
    assert re.search(r"best (found|: baseline)", console), console
    for row in ("CPU_only", "optimum", "outputs in"):
        assert row in console, console
    assert str(run.resolve()) in r.stdout
    # what the libraries said is kept in the run folder
    assert (run / "libraries.log").is_file()


def test_main_command_shows_learning(default_run):
    """The default demo is a problem whose optimum is a real split, not a single
    device, and the run's own proposals reach it. (Its first iteration may reach it
    already: the repair of an overflowing proposal, hsdag_core/fit.py, takes the
    cheapest set of moves, and from a proposal close to the optimum that can be it.)"""
    _, r, run = default_run
    s = json.loads((run / "summary.json").read_text())
    b = s["baselines"]
    singles = [v for k, v in b.items() if k.endswith("_only") and v is not None]
    assert b["optimum"] < 0.97 * min(singles), b
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    bests = [row["best_latency_s"] for row in rows if row["best_latency_s"] is not None]
    # the best never beats the exact optimum of the same profile, and never gets worse
    assert min(bests) >= b["optimum"] * (1 - 1e-9), (bests[:3], b["optimum"])
    assert all(later <= earlier for earlier, later in zip(bests, bests[1:]))
    assert s["best_source"] == "learner"
    assert s["best_latency_s"] <= 1.01 * b["optimum"]


@pytest.mark.slow
def test_resume_a_relative_run_folder(default_run):
    cwd, r, run = default_run
    assert r.returncode == 0
    rel = run.relative_to(cwd)
    n1 = len((run / "metrics.jsonl").read_text().splitlines())
    r2 = run_shell(f"python -m hsdag_ray.train --resume {rel} --budget 600", cwd)
    assert r2.returncode == 0, r2.stderr[-3000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [x["iteration"] for x in rows] == list(range(1, len(rows) + 1)) and len(rows) > n1
    s = json.loads((run / "summary.json").read_text())
    assert s["placements"] >= 600
