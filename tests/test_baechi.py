"""Baechi's m-TOPO, m-ETF and m-SCT (policies.solvers.baechi) on hand-made DAGs with
exact expected placements, the solve command, and m-etf as a measured train method."""
import json

import numpy as np
import pytest

from envs.simulator import OBJECTIVES
from hsdag_core.costgraph import CostGraph
from hsdag_ray.solve import main as solve_main
from policies.registry import METHODS
from policies.solvers.baechi import favourite_children
from policies.solvers.exact import SOLVERS, solve

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process

BAECHI = ("m-topo", "m-etf", "m-sct")


def dag(edges, comp, transfer, mem=None, cap=None, colocate=None, D=2):
    """A DAG whose node ``u`` produces one tensor per consumer, ``transfer[(u, v)]`` seconds
    over any link (``edges`` in topological order of the nodes 0..n-1)."""
    n = len(comp)
    return CostGraph(
        names=[f"n{i}" for i in range(n)], devices=[f"D{d}" for d in range(D)],
        compute_s=np.asarray(comp, dtype=float).reshape(n, D),
        tensor_src=[u for u, _ in edges], tensor_bytes=[1.0] * len(edges),
        edge_src=[u for u, _ in edges], edge_dst=[v for _, v in edges],
        edge_tensor=list(range(len(edges))),
        tensor_transfer_s=[transfer[e] for e in edges],
        mem_bytes=mem, mem_capacity=cap, colocate=colocate)


def chain(n, mem, cap, D=2):
    return dag([(i, i + 1) for i in range(n - 1)], [[1.0] * D] * n,
               {(i, i + 1): 0.1 for i in range(n - 1)}, mem=mem, cap=cap, D=D)


def test_registered_for_every_objective_and_as_methods():
    for name in BAECHI:
        assert set(SOLVERS[name].objectives) == set(OBJECTIVES)
        assert SOLVERS[name].exact == ()
        m = METHODS[name]
        assert m.approach == "solver" and m.costs and m.run.startswith("policies.solvers.methods:")


def test_m_topo_fills_the_devices_in_turn_up_to_their_share():
    g = chain(6, mem=[1.0] * 6, cap=[10.0, 10.0])          # share: 3 bytes each
    r = solve(g, "sequential", "m-topo")
    assert r.placement.tolist() == [0, 0, 0, 1, 1, 1] and r.feasible
    assert r.info["planning_s"] == r.solve_s > 0
    # three devices: a third each
    g3 = chain(6, mem=[1.0] * 6, cap=[10.0] * 3, D=3)
    assert solve(g3, "parallel", "m-topo").placement.tolist() == [0, 0, 1, 1, 2, 2]


def test_m_topo_share_is_capped_by_a_small_device():
    g = chain(6, mem=[1.0] * 6, cap=[2.0, 10.0])           # device 0 holds only 2
    assert solve(g, "sequential", "m-topo").placement.tolist() == [0, 0, 1, 1, 1, 1]


def test_m_etf_and_m_sct_split_a_chain_only_when_memory_forces_it():
    free = chain(4, mem=[1.0] * 4, cap=[np.inf, np.inf])
    limited = chain(4, mem=[1.0] * 4, cap=[3.0, 3.0])
    for method in ("m-etf", "m-sct"):
        assert solve(free, "parallel", method).placement.tolist() == [0, 0, 0, 0]
        r = solve(limited, "parallel", method)
        assert r.placement.tolist() == [0, 0, 0, 1] and r.feasible, method
        assert r.value == pytest.approx(4.1)   # four nodes and one transfer


def fork():
    """a -> b -> c, a -> x: the tensor a -> b is dear (1 s), a -> x cheap (0.1 s); x is long
    (4 s) so it ranks above b; both can start on a's device at t = 1."""
    return dag([(0, 1), (0, 3), (1, 2)], [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [4.0, 4.0]],
               {(0, 1): 1.0, (0, 3): 0.1, (1, 2): 1.0})


def test_m_sct_keeps_the_favourite_chain_that_m_etf_splits():
    g = fork()
    assert favourite_children(g).tolist() == [1, 2, -1, -1]
    # ETF: x (higher rank) takes device 0 at t=1, so b starts sooner on device 1 (t=2)
    etf = solve(g, "parallel", "m-etf")
    assert etf.placement.tolist() == [0, 1, 1, 0]
    assert etf.info["schedule_makespan_s"] == pytest.approx(5.0)
    # SCT: b, a's favourite child, stays with a and goes first; x moves to device 1
    sct = solve(g, "parallel", "m-sct")
    assert sct.placement.tolist() == [0, 0, 0, 1]
    assert sct.info["schedule_makespan_s"] == pytest.approx(5.1)
    assert sct.value == pytest.approx(5.1) and etf.value == pytest.approx(5.0)


def test_unsupported_devices_and_colocation_are_respected():
    g = dag([(0, 1), (1, 2), (2, 3)], [[1.0, 1.0], [np.inf, 1.0], [1.0, 1.0], [1.0, 1.0]],
            {(0, 1): 0.1, (1, 2): 0.1, (2, 3): 0.1}, colocate=[-1, 7, -1, 7])
    for method in BAECHI:
        r = solve(g, "parallel", method)
        assert r.feasible, method
        assert r.placement[1] == 1 and r.placement[3] == 1, method


def test_nothing_fits_is_no_placement_with_a_reason():
    g = chain(3, mem=[5.0] * 3, cap=[4.0, 4.0])
    for method in BAECHI:
        r = solve(g, "sequential", method)
        assert not r.feasible and "no device can run and hold node 'n0'" in r.status


def test_solve_command_prints_the_planning_time(tmp_path, capsys):
    from hsdag_ray.cli import run

    from conftest import small_dnnpart

    path = small_dnnpart(tmp_path / "small.json", max_size=15.0)
    for method in BAECHI:
        code = run(solve_main, ["--graph", str(path), "--objective", "parallel", "--method",
                                method], prog="hsdag_ray.solve")
        text = capsys.readouterr().out
        assert code == 0, text
        assert "(planning time)" in text and f"method {method}" in text
        code = run(solve_main, ["--graph", str(path), "--objective", "sequential", "--method",
                                method, "--json"], prog="hsdag_ray.solve")
        d = json.loads(capsys.readouterr().out)
        assert code == 0 and d["feasible"] and d["info"]["planning_s"] == d["solve_s"]
        # each accelerator holds one 10-byte node at most
        per_dev = {}
        for dev in d["placement"].values():
            per_dev[dev] = per_dev.get(dev, 0) + 1
        assert all(c <= 1 for dev, c in per_dev.items() if dev != "CPU0"), per_dev


def test_train_m_etf_on_the_simulator_is_measured_once(tmp_path):
    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.training import train

    cfg = TrainConfig.of(model="tiny_cnn", backend="simulator", devices=["CPU", "GPU_MODEL"],
                      env_runners=0, wandb="disabled", out=str(tmp_path), name="etf",
                      method="m-etf", budget=20)
    train(cfg, quiet=True)
    s = json.loads((tmp_path / "etf" / "summary.json").read_text())
    assert s["method"] == "m-etf"
    assert s["measurements"] == 1 and s["placements"] == 1
    assert s["method_best_latency_s"] > 0


def test_etf_start_measures_m_etf_first_for_a_learned_method(tmp_path):
    """--etf-start: m-ETF's placement on the run's profile is the run's first measurement."""
    from envs.simulator import Simulator
    from hsdag_core.coarsening import build_graph
    from hsdag_core.device_profile import Profile, cost_graph
    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.resolve import resolve_backend
    from hsdag_ray.run.training import train

    cfg = TrainConfig.of(model="tiny_cnn", backend="simulator", devices=["CPU", "GPU_MODEL"],
                      env_runners=0, wandb="disabled", out=str(tmp_path), name="hsdag",
                      method="hsdag", budget=20, episode_len=10, etf_start=True)
    train(cfg, quiet=True)
    s = json.loads((tmp_path / "hsdag" / "summary.json").read_text())
    log = json.loads((tmp_path / "hsdag" / "store.json").read_text())["log"]
    assert s["etf_start"] and s["guided_by"] == ["m-ETF start"] and not s["exact_start"]
    _, devices, profile = resolve_backend(cfg, lambda msg: None)
    graph = build_graph(cfg.run.model, cfg.env.coarsen)[2]
    costs = cost_graph(graph, Profile.from_json(profile), devices)
    etf = solve(costs, cfg.env.objective, "m-etf")
    assert log[0]["suggested"]
    assert log[0]["latency_s"] == pytest.approx(Simulator(costs).evaluate(etf.placement,
                                                                          cfg.env.objective).value)
    assert s["measurements"] >= 2


def test_etf_start_needs_a_profile_and_a_searching_method():
    from hsdag_ray.cli import UsageError
    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.resolve import check_method_inputs

    with pytest.raises(UsageError, match="--etf-start solves m-ETF on the run's profile"):
        check_method_inputs(TrainConfig.of(method="placeto", etf_start=True), ["CPU", "CPU_F32"], None)
    from hsdag_ray.run.resolve import resolve_backend

    cfg = TrainConfig.of(model="tiny_cnn", backend="simulator", devices=["CPU", "GPU_MODEL"],
                      method="m-etf", etf_start=True)
    _, devices, profile = resolve_backend(cfg, lambda msg: None)
    with pytest.raises(UsageError, match="m-etf computes one placement, so drop it"):
        check_method_inputs(cfg, devices, profile)
