"""The learning-dynamics reading of bench_learning / bench_methods: what an optimum asks a
grouping to express, a run's entropy and groups per iteration, and the table built from them."""
from __future__ import annotations

import json
from pathlib import Path

from bench.learning_curves import learning_state, optimum_shape
from bench.bench_methods import dynamics_table
from hsdag_core.compgraph import CompGraph, Edge, Node


def _chain(n: int) -> CompGraph:
    nodes = [Node(name=f"n{k}", op_type="MatMul", ops=[f"n{k}"]) for k in range(n)]
    edges = [Edge(src=k, dst=k + 1, port=0, shape=[1], dtype="f32", bytes=4.0) for k in range(n - 1)]
    return CompGraph("chain", nodes, edges)


def test_optimum_shape_counts_moved_nodes_and_their_pieces():
    graph = _chain(8)
    # main device 0; nodes 2,3 (one piece) and 6 (another) on device 1
    shape = optimum_shape(graph, [0, 0, 1, 1, 0, 0, 1, 0])
    assert (shape["nodes"], shape["moved"], shape["pieces"]) == (8, 3, 2)
    assert (optimum_shape(graph, [1] * 8)["moved"], optimum_shape(graph, [1] * 8)["pieces"]) == (0, 0)
    # neighbours on two different minor devices are two pieces, not one
    assert optimum_shape(graph, [0, 1, 2, 0, 0, 0, 0, 0])["pieces"] == 2


def test_learning_state_reads_metrics_rows(tmp_path):
    rows = [{"iteration": 1, "measurements": 20, "entropy": 3.0, "num_groups": 6.5},
            {"iteration": 2, "measurements": 37, "entropy": 2.5}]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert learning_state({"run_dir": str(tmp_path)}) == [(20, 3.0, 6.5), (37, 2.5, None)]


def test_dynamics_table_reads_budgets_targets_and_final_state():
    # best 1.5x at 1, 1.04x from 5, 1.0x from 50 measurements, of 60
    curve = [(n, 1.5 if n < 5 else (1.04 if n < 50 else 1.0), None) for n in range(1, 61)]
    case = {"method": "hsdag", "model": "m", "accelerator": "A", "curves": [(curve, 1.0)],
            "states": [[(20, 3.0, 6.0), (60, 0.25, 4.0)]],
            "shape": {"nodes": 4, "moved": 1, "pieces": 1, "placement": [0, 1, 0, 0]},
            "best_placements": [[1, 1, 0, 1]]}
    search = {"method": "exact (profile)", "model": "m", "accelerator": "A",
              "curves": [([(1, 1.2, None)], 1.0)]}  # no policy: no row
    lines = dynamics_table([case, search], [1, 10, 100])
    assert len(lines) == 3
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    assert cells[3:6] == ["1.500", "1.040", "1.000"]
    assert cells[6:8] == ["5", "50"]  # measurements to 1.05x and to 1.01x
    assert cells[8:] == ["0.250", "4.0", "1/4 (1 pieces)", "2"]  # 2 nodes placed otherwise
    never = dict(case, curves=[([(n, 1.2, None) for n in range(1, 61)], 1.0)])
    assert [c.strip() for c in dynamics_table([never], [10])[2].strip("|").split("|")][4:6] == [">60", ">60"]


def test_merge_prints_and_draws_earlier_runs(tmp_path):
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    curve = [[n, 1.3 if n < 20 else 1.0, 0.1 * n] for n in range(1, 61)]
    case = {"model": "m", "accelerator": "A", "method": "hsdag", "ratios": [1.0], "proven": True,
            "curves": [[curve, 1.0]], "states": [[[20, 3.0, 6.0], [60, 0.02, 4.0]]],
            "shape": {"nodes": 4, "moved": 1, "pieces": 1, "placement": [0, 1, 0, 0]},
            "best_placements": [[0, 1, 0, 0]]}
    (tmp_path / "a.json").write_text(json.dumps([case]))
    out = subprocess.run([sys.executable, str(root / "bench" / "bench_methods.py"), "--guide", "off",
                          "--seeds", "0", "--budgets", "10,60", "--merge", str(tmp_path / "a.json"),
                          "--dynamics", str(tmp_path / "d.png")], cwd=root, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "| m | A | 1.000 |" in out.stdout  # the 60-measurement comparison table
    assert "| hsdag | m | A | 1.300 | 1.000 | 20 | 20 | 0.020 | 4.0 | 1/4 (1 pieces) | 0 |" in out.stdout
    assert (tmp_path / "d.png").stat().st_size > 0
