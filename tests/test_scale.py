"""The learned methods on a few-thousand-node graph: a forward pass and an update complete,
in reasonable memory (bench/bench_scale.py, the same code the 50,000-node figures come from)."""
import math
import sys
from pathlib import Path

import pytest


from bench.bench_scale import run_isolated  # noqa: E402

NODES = 3000


@pytest.mark.slow  # 10-15 s each; bench/bench_scale.py gives the figures
@pytest.mark.parametrize("method", ["gdp", "hsdag"])
def test_forward_and_update_on_a_large_graph(method):
    r = run_isolated(method, NODES, steps=20, timeout=600)
    assert "error" not in r, r
    assert r["nodes"] == NODES and r["edges"] > NODES
    for k in ("forward_s", "update_s", "forward_cpu_s", "update_cpu_s", "update_warm_s", "update_warm_cpu_s"):
        assert math.isfinite(r[k]) and r[k] > 0, (k, r)
    # one process with torch, RLlib and the module holds about 1 GB; a method that kept
    # per-node-pair state (3000^2 floats per head and layer) would not stay under 3 GB
    assert r["peak_rss_gb"] < 3.0, r
    assert r["peak_rss_gb"] >= r["built_rss_gb"]
