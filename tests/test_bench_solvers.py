"""bench/bench_solvers.py's device sets: ``DEVICE*N`` copies and bad input."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.bench_solvers import _short, device_sets

ROOT = Path(__file__).resolve().parents[1]


def test_copies_expand_and_print_back_as_runs() -> None:
    sets = device_sets("CPU+GPU_TINYMEM*3+NPU_MODEL,CPU")
    assert sets == [("CPU", "GPU_TINYMEM", "GPU_TINYMEM", "GPU_TINYMEM", "NPU_MODEL"), ("CPU",)]
    assert ["+".join(_short(s)) for s in sets] == ["CPU+GPU_TINYMEM*3+NPU_MODEL", "CPU"]


@pytest.mark.parametrize("bad", ["CPU+GPU_TINYMEM*0", "CPU+GPU_TINYMEM*x", "CPU+GPU_TINYMEM*"])
def test_a_count_that_is_not_positive_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="positive count"):
        device_sets(bad)


@pytest.mark.parametrize("args, says", [
    (["--device-sets", "CPU+GPU_TINYMEM*0"], "positive count"),
    (["--device-sets", "CPU+FOO*2"], "unknown device 'FOO'"),
    (["--objectives", "latency"], "--objectives"),
])
def test_bad_input_exits_2_with_one_sentence(args: list, says: str) -> None:
    r = subprocess.run([sys.executable, "bench/bench_solvers.py", "--no-dnnpart", *args],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr
