"""DOPPLER's compute graphs: read as cost graphs, scored as DOPPLER's simulator scores them,
placed by its critical path, and solved with CP-SAT."""
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from envs.simulator import Simulator
from hsdag_core.doppler import TICK_S, load_doppler, read_doppler
from policies.solvers.critical_path import critical_path_episode, solve_critical_path
from policies.solvers.exact import EXACT_SOLVERS, solve

DOPPLER = Path(__file__).resolve().parents[1].parent / "shared" / "benchmarks" / "doppler"
FILES = ["gdp_chain_mm_112nodes", "gdp_ffnn_192nodes", "gdp_transformer_block_215nodes",
         "gdp_full_transformer_layer_261nodes", "8gpu_transformer_block", "8gpu_full_transformer"]


@pytest.fixture(scope="module")
def doppler_dir() -> Path:
    if not DOPPLER.is_dir():
        pytest.skip("DOPPLER's compute graphs (../shared/benchmarks/doppler) are not beside the project")
    return DOPPLER


def test_every_graph_loads_with_doppler_ids_and_gpus(doppler_dir):
    for name in FILES:
        g = load_doppler(doppler_dir / f"{name}.txt")
        raw = read_doppler(doppler_dir / f"{name}.txt")
        assert g.names == [str(i) for i in range(raw.n)]
        assert g.num_devices == (8 if name.startswith("8gpu") else 4)
        assert g.compute_s[:, 0] == pytest.approx(np.asarray(raw.comp) * TICK_S)
        assert g.event_order == "doppler" and g.time_tick_s == TICK_S
        assert {(int(u), int(v)) for u, v in zip(g.edge_src, g.edge_dst)} == set(zip(raw.src, raw.dst))
    assert load_doppler(doppler_dir / "gdp_chain_mm_112nodes.txt").num_nodes == 76


def test_the_parallel_objective_equals_doppler_simulator(doppler_dir):
    """The project's value of a placement equals DOPPLER's simulator (tests/doppler_reference.py:
    its get_cost on simpy), on its six graphs, for several placements; the topological
    tie-break does not (it differs on most graphs)."""
    pytest.importorskip("simpy")
    import dataclasses

    sys.path.insert(0, str(Path(__file__).parent))
    from doppler_reference import get_cost

    differs = 0
    for name in FILES:
        path = doppler_dir / f"{name}.txt"
        g = load_doppler(path)
        sim, by_index = Simulator(g), Simulator(dataclasses.replace(g, event_order="index"))
        rng = np.random.default_rng(0)
        placements = [np.zeros(g.num_nodes, dtype=np.int64), np.arange(g.num_nodes) % g.num_devices,
                      critical_path_episode(g, rng, "coded")]
        placements += [rng.integers(0, g.num_devices, g.num_nodes) for _ in range(2)]
        for p in placements:
            ref = get_cost(path, p.tolist())
            assert sim.evaluate(p, "parallel").value == pytest.approx(ref, rel=1e-6, abs=0)
            differs += abs(by_index.evaluate(p, "parallel").value - ref) > 1e-6 * ref
    assert differs > 0


def _corrupted(doppler_dir, tmp_path) -> Path:
    bad = tmp_path / "chain_mm.txt"
    shutil.copy(doppler_dir / "gdp_chain_mm_112nodes.txt", bad)
    lines = bad.read_text().splitlines()
    lines[3] = "99, " + lines[3].split(", ", 1)[1]   # an edge to op 99 of 76
    bad.write_text("\n".join(lines) + "\n")
    return bad


def test_an_edge_id_out_of_range_is_one_sentence(doppler_dir, tmp_path, capsys):
    from tests.test_bad_inputs import one_error

    bad = _corrupted(doppler_dir, tmp_path)
    with pytest.raises(ValueError, match="line 4 has edge id 99, out of range for the 76 op nodes"):
        load_doppler(bad)
    line = one_error(capsys, "solve", ["--graph", bad, "--objective", "parallel", "--method", "heft"])
    assert "edge id 99" in line and "corrupted" in line


def test_solve_reads_a_doppler_graph(doppler_dir, capsys):
    from hsdag_ray.solve import main

    assert main(["--graph", str(doppler_dir / "gdp_chain_mm_112nodes.txt"), "--objective",
                 "parallel", "--method", "m-etf", "--json"]) == 0
    assert '"feasible": true' in capsys.readouterr().out


def test_critical_path_versions_differ_as_the_repository_codes_them(doppler_dir):
    """The coded node selection takes the oldest candidate; the intended one the highest
    b-level: on the chain of matmuls they place differently. Both are valid placements
    scored by the simulator, and the best of several episodes is no worse than one."""
    g = load_doppler(doppler_dir / "gdp_chain_mm_112nodes.txt")
    coded = critical_path_episode(g, np.random.default_rng(0), "coded")
    intended = critical_path_episode(g, np.random.default_rng(0), "intended")
    assert not np.array_equal(coded, intended)
    one = solve_critical_path(g, "parallel", episodes=1, version="intended")
    many = solve_critical_path(g, "parallel", episodes=5, version="intended")
    assert many.value <= one.value and many.feasible
    assert many.value == pytest.approx(Simulator(g).parallel(many.placement).value)


def test_cpsat_is_the_exact_parallel_solver_and_proves_small_optima():
    """On a small graph CP-SAT proves its optimum, which no list schedule beats; its
    value is the simulator's and its bound a bound."""
    from itertools import product

    from hsdag_core.synthetic import random_cost_graph

    assert EXACT_SOLVERS["parallel"] == "cpsat"
    g = random_cost_graph(7, devices=3, seed=1)
    res = solve(g, "parallel", "exact", time_limit=20)
    assert res.method == "cpsat" and res.optimal and res.gap <= 1e-6
    sim = Simulator(g)
    brute = min(sim.parallel(np.array(p)).value for p in product(range(g.num_devices), repeat=g.num_nodes))
    assert res.value == pytest.approx(brute, rel=1e-6)
    assert res.bound <= brute * (1 + 1e-9)


def test_annealing_under_the_simulator_reaches_the_optimum_of_a_small_graph():
    """From the worst single device, annealing finds the best list schedule of an 8-node
    graph on two devices, scored by the simulator, and stops when its runs stop finding
    better placements, long before its deadline."""
    import time
    from itertools import product

    from hsdag_core.synthetic import random_cost_graph
    from policies.solvers.polish import anneal

    g = random_cost_graph(8, devices=2, seed=3)
    sim = Simulator(g)
    brute = min(sim.parallel(np.array(p)).value for p in product(range(2), repeat=g.num_nodes))
    worst = max((np.full(g.num_nodes, d) for d in range(2)), key=lambda p: sim.parallel(p).value)
    assert sim.parallel(worst).value > brute * (1 + 1e-6)
    p, value, runs = anneal(sim, worst, "parallel", time.perf_counter() + 30.0)
    assert 4 <= runs < 30        # runs of 1,600 evaluations until three in a row find nothing
    assert value == pytest.approx(sim.parallel(p).value)
    assert value == pytest.approx(brute, rel=1e-9)


def test_a_doppler_model_spec_gives_the_same_costs_and_order(doppler_dir):
    """``--model doppler:FILE`` (train, sweep, the bench scripts): its placement graph and
    profile make the cost graph load_doppler makes, DOPPLER's event order included."""
    from hsdag_core.coarsening import build_graph
    from hsdag_core.device_profile import Profile, cost_graph
    from hsdag_core.doppler import doppler_profile

    path = doppler_dir / "8gpu_transformer_block.txt"
    spec = f"doppler:{path}"
    _, _, graph, _ = build_graph(spec, "colocation")
    prof = Profile.from_json(doppler_profile(spec).to_json())
    cg, direct = cost_graph(graph, prof), load_doppler(path)
    assert cg.devices == direct.devices and cg.names == direct.names
    assert cg.event_order == "doppler" and cg.time_tick_s == TICK_S
    rng = np.random.default_rng(3)
    for _ in range(3):
        p = rng.integers(0, cg.num_devices, cg.num_nodes)
        assert Simulator(cg).parallel(p).value == pytest.approx(Simulator(direct).parallel(p).value,
                                                                 rel=1e-12)


def test_a_missing_doppler_file_is_one_sentence(capsys, tmp_path):
    from hsdag_core.errors import GraphError
    from hsdag_core.models import check_model_spec

    with pytest.raises(GraphError, match="no such DOPPLER compute graph"):
        check_model_spec(f"doppler:{tmp_path / 'none.txt'}")


def test_train_refuses_a_corrupted_doppler_file_in_one_sentence(doppler_dir, tmp_path, capsys):
    from tests.test_bad_inputs import one_error

    bad = _corrupted(doppler_dir, tmp_path)
    line = one_error(capsys, "train", ["--model", f"doppler:{bad}", "--method", "anneal",
                                       "--backend", "simulator", "--objective", "parallel",
                                       "--budget", "5", "--env-runners", "0", "--wandb", "disabled",
                                       "--out", tmp_path])
    assert "edge id 99" in line


def test_the_polish_ends_at_a_local_optimum_of_single_moves():
    import time

    from hsdag_core.synthetic import random_cost_graph
    from policies.solvers.polish import polish

    g = random_cost_graph(12, devices=3, seed=2)
    sim = Simulator(g)
    start = np.zeros(g.num_nodes, dtype=np.int64)
    p, value, kept = polish(sim, start, "parallel", time.perf_counter() + 30)
    assert value == pytest.approx(sim.parallel(p).value) and value <= sim.parallel(start).value
    for i in range(g.num_nodes):
        for d in range(g.num_devices):
            q = p.copy()
            q[i] = d
            assert sim.parallel(q).value >= value * (1 - 1e-9)
