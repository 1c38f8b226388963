"""bench/bench_real_pair.py end to end: three methods trained, their run folders read and re-measured."""
from __future__ import annotations

import json

import pytest

from bench.bench_real_pair import analyse, run_pair, table

pytestmark = pytest.mark.ray  # runs train in this process, on the session's shared Ray


def test_the_table_has_a_row_per_method_read_from_its_run_folder(tmp_path, tiny_profile_file):
    from hsdag_ray.train import main as train_main

    # the same flags the bench gives a subprocess, run in this process (no Ray start per run)
    folders = run_pair("sim", "tiny_cnn", ["refit", "anneal", "hsdag"], [0], 6, tmp_path,
                       tiny_profile_file, 1, lambda argv: train_main(argv), extra=["--env-runners", "0"],
                       backend="simulator", devices=["CPU_MODEL", "GPU_MODEL"])
    assert [f.name for f in folders] == [f"sim-tiny_cnn-{m}-s0" for m in ("refit", "anneal", "hsdag")]
    res = analyse(folders, rounds=2, block=1)
    rows = res["rows"]
    assert [r["method"] for r in rows] == ["refit", "anneal", "hsdag"]
    assert not any(r["guide"] for r in rows)
    bound = res["within"] * res["reference_s"]
    for r, folder in zip(rows, folders):
        summary = json.loads((folder / "summary.json").read_text())
        curve = [json.loads(x) for x in (folder / "curve.jsonl").read_text().splitlines()]
        assert r["measurements"] == summary["measurements"] == len(curve) >= 6
        assert r["wall_s"] == pytest.approx(summary["wall_s"])
        # the first measurement whose measured best was within 1.01x of the reference
        hits = [c["measurement"] for c in curve if c["best_latency_s"] <= bound]
        assert r["to_within"] == (hits[0] if hits else None)
        if hits:
            assert r["wall_to_within_s"] == pytest.approx(curve[hits[0] - 1]["wall_s"])
        # the simulator re-measures exactly: the final best is what the run's summary timed
        assert r["final_s"] == pytest.approx(summary["method_best_latency_s"], rel=1e-9)
        assert r["ratio"] >= 1.0 - 1e-12
        assert r["re_to_within"] is None or 1 <= r["re_to_within"] <= r["measurements"]
    assert min(r["ratio"] for r in rows) == pytest.approx(1.0)
    assert set(res["singles"]) == {"all CPU_MODEL", "all GPU_MODEL"}
    text = table(res).splitlines()
    for r in rows:
        line = next(x for x in text if x.startswith(f"| {r['method']} |"))
        assert f"| {r['measurements']} |" in line and f"{r['final_s'] * 1e3:.2f}" in line
