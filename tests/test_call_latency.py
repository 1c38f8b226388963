"""The ``latency`` objective (Tarnawski et al.'s latency model) against the authors' own
values, and its solvers and command-line scoring."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from envs.simulator import Simulator
from hsdag_core.costgraph import CostGraph
from hsdag_core.dnnpart import dnnpart_from_dict, load_dnnpart, load_expert_split
from policies.solvers.exact import EXACT_SOLVERS, solve

# greedy.cpp -computeLatency of the authors' repository, in ms (printed to 3 decimals)
ALL_CPU = {"LayerGraphs/bert24": 924.06, "LayerGraphs/gnmt": 1824.35,
           "LayerGraphs/inceptionv3": 1952.77, "LayerGraphs/resnet50": 1874.55,
           "OperatorGraphs/bert_l-3": 1099.93, "OperatorGraphs/bert_l-6": 1724.79,
           "OperatorGraphs/bert_l-12": 14016.85, "OperatorGraphs/resnet50": 6666.67}
EXPERT = {"bert24": 111.94, "gnmt": 293.40, "inceptionv3": 865.52, "resnet50": 1014.93}


def _same(value_s: float, printed_ms: float) -> bool:
    """``value_s`` prints as the authors' figure: 3 decimals, then rounded to 2."""
    return abs(round(value_s * 1e3, 3) - printed_ms) <= 0.005 + 1e-9


@pytest.mark.parametrize("name", sorted(ALL_CPU))
def test_all_cpu_matches_the_authors(benchmarks_dir, name):
    g = load_dnnpart(benchmarks_dir / "latency-inputs" / f"{name}_inference.json")
    res = Simulator(g).evaluate(g.single_device("CPU0"), "latency")
    assert res.feasible and _same(res.value, ALL_CPU[name]), res.value


@pytest.mark.parametrize("name", sorted(EXPERT))
def test_human_expert_splits_match_the_authors(benchmarks_dir, name):
    path = benchmarks_dir / "latency-inputs" / "LayerGraphs" / f"{name}_inference.json"
    split = benchmarks_dir / "human-experts" / f"{name}_inference_expert.json"
    used = len(json.loads(split.read_text())["fpgas"])
    g = load_dnnpart(path)
    g = load_dnnpart(path, extra_accs=max(used - (g.num_devices - 8), 0))
    res = Simulator(g).evaluate(load_expert_split(split, g), "latency")
    assert _same(res.value, EXPERT[name]), res.value


def test_no_placement_within_memory_beats_the_resnet50_expert(benchmarks_dir):
    """The path bound counts what a call sends to the branches beside the path (the
    shortcut convolutions): on the resnet50 layer graph it rises above the human expert's
    split, which holds 3.5x an accelerator's memory, so no placement within memory beats it."""
    from policies.solvers.latency_bound import path_bound

    g = load_dnnpart(benchmarks_dir / "latency-inputs" / "LayerGraphs" / "resnet50_inference.json")
    assert path_bound(g) * 1e3 > EXPERT["resnet50"]


def _chain() -> CostGraph:
    """a -> b -> c -> d; b and d fit one accelerator together, not with c."""
    nodes = [{"id": i, "supportedOnFpga": 1, "cpuLatency": 10.0, "fpgaLatency": 1.0,
              "isBackwardNode": 0, "size": s} for i, s in enumerate([1, 4, 4, 4])]
    edges = [{"sourceId": i, "destId": i + 1, "cost": 2.0} for i in range(3)]
    return dnnpart_from_dict({"maxSizePerFPGA": 8, "maxFPGAs": 2, "maxCPUs": 1,
                              "nodes": nodes, "edges": edges})


def test_calls_pay_inputs_compute_and_outputs_once():
    g = _chain()
    sim = Simulator(g)
    # a on the CPU, b+c on ACC0, d on the CPU: 10, then 2 in + 2 compute + 2 out, then 10
    res = sim.evaluate(np.array([0, 1, 1, 0]), "latency")
    assert res.feasible and res.value == pytest.approx(0.026)
    # b on ACC0, c on ACC1: the edge between accelerators costs twice
    res = sim.evaluate(np.array([0, 1, 2, 0]), "latency")
    assert res.value == pytest.approx(0.010 + 0.005 + 0.005 + 0.010)


def test_a_non_contiguous_accelerator_is_infeasible_with_one_sentence():
    res = Simulator(_chain()).evaluate(np.array([0, 1, 0, 1]), "latency")
    assert not res.feasible and not np.isfinite(res.value)
    assert "contracted by accelerator has a cycle" in res.violation


def test_exact_proves_the_optimum_of_a_small_chain():
    g = _chain()
    r = solve(g, "latency", "exact", time_limit=20)
    assert EXACT_SOLVERS["latency"] == "milp" and r.optimal and r.feasible
    # the best of every placement that respects memory and contiguity
    sim = Simulator(g)
    best = min(v for p in np.ndindex(*(3,) * 4)
               if (res := sim.evaluate(np.array(p), "latency")).feasible and np.isfinite(v := res.value))
    assert r.value == pytest.approx(best)


def test_search_beats_the_authors_greedy(benchmarks_dir):
    g = load_dnnpart(benchmarks_dir / "latency-inputs" / "LayerGraphs" / "gnmt_inference.json")
    greedy = solve(g, "latency", "latency-greedy")
    assert greedy.feasible and round(greedy.value * 1e3, 2) == 268.50   # the authors' greedy
    search = solve(g, "latency", "latency-search", time_limit=5)
    assert search.feasible and search.value < greedy.value and search.bound <= search.value


def test_methods_without_latency_say_so():
    with pytest.raises(ValueError, match="does not solve the latency objective"):
        solve(_chain(), "latency", "heft")


def test_solve_evaluate_scores_and_flags_an_expert_split(benchmarks_dir):
    graph = benchmarks_dir / "latency-inputs" / "LayerGraphs" / "bert24_inference.json"
    split = benchmarks_dir / "human-experts" / "bert24_inference_expert.json"
    out = subprocess.run([sys.executable, "-m", "hsdag_ray.solve", "--graph", str(graph),
                          "--objective", "latency", "--evaluate", str(split), "--json"],
                         capture_output=True, text=True, check=True)
    doc = json.loads(out.stdout)
    assert _same(doc["value_s"], EXPERT["bert24"]) and not doc["feasible"]
    assert doc["flags"] == ["the split uses 6 accelerators where the input allows 5"]


def _random_input(seed: int, n: int = 7, colocated: bool = False) -> CostGraph:
    """A random layered DAG with one CPU and two accelerators whose memory binds
    (``colocated``: two or three random co-location classes of two or three nodes)."""
    rng = np.random.default_rng(seed)
    nodes = [{"id": i, "supportedOnFpga": int(rng.random() > 0.1),
              "cpuLatency": float(rng.uniform(1, 10)), "fpgaLatency": float(rng.uniform(0.1, 2)),
              "isBackwardNode": 0, "size": float(rng.uniform(0, 4))} for i in range(n)]
    if colocated:
        perm = rng.permutation(n)
        cuts = np.cumsum(rng.integers(2, 4, size=3))
        for c, members in enumerate(np.split(perm, cuts)[:int(rng.integers(2, 4))]):
            for i in members[:3] if members.size >= 2 else []:
                nodes[int(i)]["colorClass"] = c
    edges = []
    for v in range(1, n):
        for u in rng.choice(v, size=min(v, int(rng.integers(1, 3))), replace=False):
            edges.append({"sourceId": int(u), "destId": v, "cost": 0.0})
    cost = rng.uniform(0, 3, size=n)
    for e in edges:
        e["cost"] = float(cost[e["sourceId"]])
    return dnnpart_from_dict({"maxSizePerFPGA": 6.0, "maxFPGAs": 2, "maxCPUs": 1,
                              "nodes": nodes, "edges": edges})


def _best_latency(g: CostGraph) -> float:
    """The least latency of any feasible placement, by trying every one."""
    sim = Simulator(g)
    best = np.inf
    for p in np.ndindex(*(g.num_devices,) * g.num_nodes):
        res = sim.evaluate(np.array(p), "latency")
        if res.feasible:
            best = min(best, res.value)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_the_path_bound_with_colocated_nodes_against_every_placement(seed):
    """A chain whose middle node sends nothing to the node it is co-located with (as a batch
    normalisation and its zero-cost outputs in the operator graphs): the bound may not cut
    there, and stays below every feasible placement."""
    from policies.solvers.latency_bound import path_bound

    rng = np.random.default_rng(seed)
    n = 6
    nodes = [{"id": i, "supportedOnFpga": 1, "cpuLatency": float(rng.uniform(5, 10)),
              "fpgaLatency": float(rng.uniform(0.5, 2)), "isBackwardNode": 0, "size": 2.0}
             for i in range(n)]
    edges = [{"sourceId": i, "destId": i + 1, "cost": 0.0 if i == 2 else float(rng.uniform(1, 3))}
             for i in range(n - 1)]
    data = {"maxSizePerFPGA": 6.0, "maxFPGAs": 2, "maxCPUs": 1, "nodes": nodes, "edges": edges}
    free = dnnpart_from_dict(data)
    nodes[2]["colorClass"] = nodes[3]["colorClass"] = 0
    tied = dnnpart_from_dict(data)
    assert path_bound(tied) <= _best_latency(tied) + 1e-12
    # memory forces a cut (three nodes per accelerator): the free one between 2 and 3 is
    # what the bound takes without the co-location, and may not take with it
    assert path_bound(free) < path_bound(tied)


@pytest.mark.parametrize("seed", range(8))
def test_the_path_bound_with_colocation_classes_against_every_placement(seed):
    """Random DAGs with random co-location classes (some contracted by the bound's quotient,
    some not): the path bound stays below the best feasible placement."""
    from policies.solvers.latency_bound import path_bound

    g = _random_input(seed, colocated=True)
    assert g.colocate is not None
    best = _best_latency(g)
    assert path_bound(g) <= best + 1e-12


@pytest.mark.parametrize("seed", range(6))
def test_bounds_and_exact_against_every_placement(seed):
    from policies.solvers.latency_bound import path_bound

    g = _random_input(seed)
    best = _best_latency(g)
    assert path_bound(g) <= best + 1e-12
    r = solve(g, "latency", "exact", time_limit=20)
    assert r.optimal and r.value == pytest.approx(best, rel=1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_sequential_path_bound_against_every_placement(seed):
    from policies.solvers.path_bound import sequential_bound

    g = _random_input(seed)
    sim = Simulator(g)
    best = min(r.value for p in np.ndindex(*(g.num_devices,) * g.num_nodes)
               if (r := sim.evaluate(np.array(p), "sequential")).feasible)
    assert sequential_bound(g) <= best + 1e-12


def test_evaluate_takes_a_placement_written_by_out_and_refuses_a_bad_file(tmp_path, capsys):
    from hsdag_ray.cli import run
    from hsdag_ray.solve import main as solve_main

    nodes = [{"id": i, "supportedOnFpga": 1, "cpuLatency": 10.0, "fpgaLatency": 1.0,
              "isBackwardNode": 0, "size": 4.0} for i in range(4)]
    edges = [{"sourceId": i, "destId": i + 1, "cost": 2.0} for i in range(3)]
    graph = tmp_path / "chain.json"
    graph.write_text(json.dumps({"maxSizePerFPGA": 8, "maxFPGAs": 2, "maxCPUs": 1,
                                 "nodes": nodes, "edges": edges}))
    out = tmp_path / "best.json"
    assert run(solve_main, ["--graph", str(graph), "--objective", "latency", "--method", "exact",
                            "--time-limit", "10", "--out", str(out), "--json"],
               prog="hsdag_ray.solve") == 0
    solved = json.loads(capsys.readouterr().out)
    assert run(solve_main, ["--graph", str(graph), "--objective", "latency", "--evaluate",
                            str(out), "--json"], prog="hsdag_ray.solve") == 0
    scored = json.loads(capsys.readouterr().out)
    assert scored["value_s"] == pytest.approx(solved["value_s"]) and scored["feasible"]
    bad = tmp_path / "bad.json"
    bad.write_text("{\"nodes\": []}")
    assert run(solve_main, ["--graph", str(graph), "--objective", "latency", "--evaluate",
                            str(bad)], prog="hsdag_ray.solve") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "neither a {cpus, fpgas} split" in err
