"""The exact solver on a profile refitted to the run's measurements (``--method refit``)."""
from __future__ import annotations

import dataclasses
import json
import time

import numpy as np
import pytest
from tests.test_bad_inputs import one_error

from envs.latency_model import LatencyModel
from envs.simulator import Simulator
from policies.solvers.exact import exact_method
from hsdag_core.synthetic import random_cost_graph
from policies.solvers.exact import solve
from policies.search.refit import ProfileThompson

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process


def wrong_profile(limited: bool):
    """A 40-node problem (the machine) and a profile of it with every node time off by
    its own factor exp(0.5 N(0, 1)) and the stage boundary at a third of its cost."""
    truth = random_cost_graph(40, seed=0)
    if limited:
        truth = dataclasses.replace(truth, mem_capacity=np.array([np.inf, 0.3 * truth.mem_bytes.sum()]))
    rng = np.random.default_rng(100)
    known = dataclasses.replace(
        truth, compute_s=truth.compute_s * np.exp(0.5 * rng.standard_normal(truth.compute_s.shape)),
        boundary_s=truth.boundary_s / 3)
    return truth, known


def exact(graph) -> np.ndarray:
    return np.asarray(solve(graph, "sequential", exact_method(graph, "sequential")).placement)


@pytest.mark.parametrize("limited", [False, True], ids=["unlimited", "memory-limited"])
def test_refitting_finds_the_machines_optimum_the_profile_misses(limited):
    truth, known = wrong_profile(limited)
    machine = Simulator(truth)
    optimum = machine.sequential(exact(truth)).value
    on_profile = exact(known)
    # the profile's own optimum is clearly not the machine's: there is something to learn
    assert machine.sequential(on_profile).value > 1.15 * optimum
    search = ProfileThompson(40, 2, 40, seed=0, costs=known)
    best = np.inf
    for k in range(40):
        p = search.propose()
        if k == 0:  # nothing measured yet: the profile's own optimum
            np.testing.assert_array_equal(p, on_profile)
        assert machine.check(p) is None  # memory is known: every proposal fits
        latency = machine.sequential(p).value
        search.observe(p, latency)
        best = min(best, latency)
    assert best == pytest.approx(optimum, rel=1e-9)
    # what was learned is the machine's costs: the refitted profile's own optimum is now
    # the machine's, and it predicts every measured latency closely
    refitted = search.model.refitted(search.model.posterior_mean())
    np.testing.assert_array_equal(exact(refitted), exact(truth))
    predicted = [Simulator(refitted).sequential(p).value for p in search.placements]
    np.testing.assert_allclose(predicted, search.latencies, rtol=0.05)
    # no placement is proposed twice
    assert len(search.seen) == 40


def test_refit_resumes_where_it_stopped():
    _, known = wrong_profile(False)
    machine = Simulator(random_cost_graph(40, seed=0))
    a = ProfileThompson(40, 2, 20, seed=3, costs=known)
    for _ in range(6):
        p = a.propose()
        a.observe(p, machine.sequential(p).value)
    state = json.loads(json.dumps(a.state_dict()))
    b = ProfileThompson(40, 2, 20, seed=99, costs=known)
    b.load_state_dict(state)
    np.testing.assert_array_equal(a.propose(), b.propose())


def test_a_measurement_of_a_repaired_placement_is_not_learned_from():
    truth, known = wrong_profile(True)
    search = ProfileThompson(40, 2, 10, costs=known)
    over = np.ones(40, dtype=np.int64)  # everything on the 30 %-memory device
    assert Simulator(truth).check(over) is not None
    search.observe(over, 1e-3)
    search.observe(np.zeros(40, dtype=np.int64), float("inf"))
    assert search.placements == [] and len(search.seen) == 2


@pytest.mark.slow
def test_refitting_the_throughput_objective_finds_the_machines_optimum():
    """Throughput (the largest device load) is not linear in the costs, but each device's
    load is: measurements are read as the load of the bottleneck the fit names."""
    truth = random_cost_graph(20, seed=1)
    rng = np.random.default_rng(100)
    known = dataclasses.replace(
        truth, compute_s=truth.compute_s * np.exp(0.5 * rng.standard_normal(truth.compute_s.shape)))
    machine = Simulator(truth)
    optimum = solve(truth, "throughput", "milp").value
    on_profile = np.asarray(solve(known, "throughput", "milp").placement)
    assert machine.throughput(on_profile).value > 1.1 * optimum
    # planning time enough for every solve to end on its own (the 1 s default is wall time,
    # which a busy machine shortens)
    search = ProfileThompson(20, 2, 20, seed=0, costs=known, objective="throughput", time_limit=30.0)
    best = np.inf
    for k in range(20):
        p = search.propose()
        if k == 0:
            np.testing.assert_array_equal(p, on_profile)
        latency = machine.throughput(p).value
        search.observe(p, latency)
        best = min(best, latency)
    assert best == pytest.approx(optimum, rel=1e-9)
    # the refitted profile predicts most measured throughputs closely and none too low (a
    # device's load is fitted where it was the bottleneck; elsewhere a measurement only
    # bounds it from above, which the regression does not use, so some are over-predicted,
    # the balanced optimum's among them)
    theta = search.model.posterior_mean()
    refitted = Simulator(search.model.refitted(theta))
    predicted = np.array([refitted.throughput(p).value for p in search.placements]) + theta[-1]
    error = predicted / search.latencies - 1  # theta[-1]: the constant, which no placement changes
    assert np.mean(np.abs(error) < 0.01) >= 0.75 and (error > -0.01).all()
    # resumed from its saved state, it reads the measurements the same way
    again = ProfileThompson(20, 2, 20, seed=0, costs=known, objective="throughput")
    again.load_state_dict(json.loads(json.dumps(search.state_dict())))
    np.testing.assert_allclose(again.model.posterior_mean(), search.model.posterior_mean(),
                               rtol=1e-6, atol=1e-12)


def test_refit_does_not_model_the_parallel_objective():
    _, known = wrong_profile(False)
    with pytest.raises(ValueError, match="sequential and throughput"):
        ProfileThompson(40, 2, 10, costs=known, objective="parallel")


@pytest.mark.slow
def test_train_refit_on_a_machine_its_profile_describes_wrongly(tmp_path, tiny_recording):
    """``train --method refit`` with ``--sim-profile``: it ends at the machine's optimum,
    where the exact solver's placement on the run's profile is 30 % slower."""
    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.training import train

    paths = {"known": tiny_recording("known", 3), "machine": tiny_recording("machine", 5)}
    cfg = TrainConfig.of(model="tiny_cnn", backend="simulator", profile=str(paths["known"]),
                      sim_profile=str(paths["machine"]), method="refit", budget=12,
                      episode_len=4, env_runners=0, wandb="disabled", out=str(tmp_path),
                      name="refit", budget_unit="measurements")
    s = train(cfg, quiet=True)
    exact_on_profile = s["baselines"]["optimum"]  # measured on the machine
    machine_optimum = train(cfg.replace(profile=str(paths["machine"]), sim_profile="",
                                                method="random", budget=1, name="machine"),
                            quiet=True)["baselines"]["optimum"]
    assert exact_on_profile > 1.3 * machine_optimum  # the profile's optimum is not the machine's
    assert s["method_best_latency_s"] == pytest.approx(machine_optimum, rel=1e-9)
    log = json.loads((tmp_path / "refit" / "store.json").read_text())["log"]
    # told the single devices' latencies first, its first placement already beats the
    # profile's own optimum
    assert log[0]["latency_s"] < exact_on_profile


@pytest.mark.slow
def test_train_refit_for_throughput(tmp_path, tiny_recording):
    """``train --method refit --objective throughput`` on a machine its profile describes
    wrongly ends at the machine's throughput optimum."""
    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.training import train

    paths = {"known": tiny_recording("known", 3), "machine": tiny_recording("machine", 5)}
    cfg = TrainConfig.of(model="tiny_cnn", backend="simulator", objective="throughput",
                      profile=str(paths["known"]), sim_profile=str(paths["machine"]),
                      method="refit", budget=12, episode_len=4, env_runners=0,
                      wandb="disabled", out=str(tmp_path), name="refit",
                      budget_unit="measurements")
    s = train(cfg, quiet=True)
    machine_optimum = train(cfg.replace(profile=str(paths["machine"]), sim_profile="",
                                                method="random", budget=1, name="machine"),
                            quiet=True)["baselines"]["optimum"]
    assert s["baselines"]["optimum"] > 1.1 * machine_optimum  # what the profile gives
    assert s["method_best_latency_s"] == pytest.approx(machine_optimum, rel=1e-9)
    assert s["objective"] == "throughput"


@pytest.mark.parametrize("args, says", [
    (["--objective", "parallel"], "sequential and throughput objectives"),
    (["--backend", "auto", "--devices", "CPU,CPU_F32"], "--profile FILE"),
])
def test_refit_refuses_what_it_cannot_model(tmp_path, capsys, args, says):
    assert says in one_error(capsys, "train", ["--method", "refit", "--model", "tiny_cnn", "--wandb",
                                               "disabled", "--out", tmp_path, *args])


def test_the_noise_level_is_fitted_to_the_measurements():
    """A deterministic machine is fitted closely, a noisy one loosely."""
    from policies.search.refit import NOISE_LEVELS

    truth, known = wrong_profile(False)
    machine = Simulator(truth)
    rng = np.random.default_rng(0)
    levels = {}
    for noise in (0.0, 0.05):
        search = ProfileThompson(40, 2, 30, seed=0, costs=known)
        for _ in range(30):
            p = search.propose()
            search.observe(p, machine.sequential(p).value * (1 + noise * rng.standard_normal()))
        levels[noise] = search.noise_level()
    assert levels[0.0] == min(NOISE_LEVELS)
    assert levels[0.05] >= 0.03


def test_single_devices_measured_before_the_search_teach_it():
    """A profile that puts everything on the second device, on a machine where the first
    alone is fastest: told the single devices' latencies (not its own proposals), the search
    proposes the first device alone as its own."""
    truth = random_cost_graph(40, seed=1)
    truth = dataclasses.replace(truth, compute_s=truth.compute_s * np.array([1.0, 3.0]))
    known = dataclasses.replace(truth, compute_s=truth.compute_s * np.array([1.0, 0.1]))
    machine = Simulator(truth)
    first_alone = np.zeros(40, dtype=np.int64)
    assert machine.sequential(first_alone).value == pytest.approx(machine.sequential(exact(truth)).value)
    search = ProfileThompson(40, 2, 10, costs=known)
    for k in range(2):
        alone = np.full(40, k, dtype=np.int64)
        search.observe(alone, machine.sequential(alone).value, proposed=False)
    assert not search.seen
    proposals = [search.propose() for _ in range(3)]
    assert any((p == first_alone).all() for p in proposals)


def test_no_placement_is_proposed_twice_once_the_model_is_sure():
    """On a graph whose every placement the model soon predicts exactly, the posterior
    draws repeat; the search then changes the best placement, by more nodes as the
    one-node changes run out, and never proposes a placement twice."""
    truth = random_cost_graph(8, seed=0)
    search = ProfileThompson(8, 2, 60, costs=truth)
    machine = Simulator(truth)
    for _ in range(60):
        p = search.propose()
        search.observe(p, machine.sequential(p).value)
    assert len(search.seen) == 60 and search.proposals["local"] > 8


def test_a_throughput_measurement_is_read_as_the_load_the_other_measurements_predict():
    """Two nodes; the profile says node 0 takes 10.5 on the CPU and each node 10 on the
    accelerator; the machine runs node 0 on the CPU in 5. The accelerator alone measures
    20, which confirms its profile. Then node 0 on the CPU and node 1 on the accelerator
    measures 10: the accelerator's load, as the first measurement predicts it. The fit
    that already read it as the CPU's (the larger by the profile) would keep that
    reading and believe the CPU too slow."""
    g = dataclasses.replace(random_cost_graph(2, seed=0), compute_s=np.array([[10.5, 10.0], [10.0, 10.0]]),
                            link_latency_s=np.zeros((2, 2)), link_bandwidth_Bps=np.full((2, 2), np.inf))
    model = LatencyModel(g, objective="throughput")
    model.add(np.array([1, 1]), 20.0)
    model.add(np.array([0, 1]), 10.0)
    assert model.bottlenecks() == [1, 1]
    mean = model.posterior_mean()
    assert mean[0] == pytest.approx(10.5)  # nothing measured the CPU: its prior stands


def test_refit_plans_each_proposal_within_its_time_limit_from_the_incumbent(monkeypatch):
    """On four devices with memory limits each proposal solves the MILP: the first
    proposal's solve is given the proposal's time (PLAN_SHARE of ``time_limit``), every
    later solve at most half of what is left of it (at least MIN_SOLVE_S); each starts from
    the best known placement under its costs, and returns one no worse than it."""
    import policies.solvers.exact as exact_mod
    from policies.search.refit import MIN_SOLVE_S, PLAN_SHARE

    truth = random_cost_graph(30, devices=4, seed=2)
    truth = dataclasses.replace(truth, mem_capacity=np.array([np.inf, 0.25, 0.25, np.inf])
                                * truth.mem_bytes.sum())
    rng = np.random.default_rng(5)
    known = dataclasses.replace(
        truth, compute_s=truth.compute_s * np.exp(0.5 * rng.standard_normal(truth.compute_s.shape)))
    # (limit, what was left of the proposal's time, start's value, result's value)
    calls: list[tuple[float, float, float, float]] = []
    real_solve = exact_mod.solve

    def recording_solve(graph, objective, method, *, time_limit=60.0, **options):
        left = search._deadline - time.perf_counter()
        res = real_solve(graph, objective, method, time_limit=time_limit, **options)
        start = options.get("start")
        start_v = np.inf if start is None else Simulator(graph).sequential(start).value
        calls.append((time_limit, left, start_v, res.value))
        return res

    monkeypatch.setattr(exact_mod, "solve", recording_solve)
    limit = 0.4
    search = ProfileThompson(30, 4, 8, seed=0, costs=known, time_limit=limit)
    assert search.solver == "milp"
    machine = Simulator(truth)
    for k in range(8):
        before = len(calls)
        p = search.propose()
        assert machine.check(p) is None
        mine = calls[before:]
        share = 1.0 if k == 0 else 0.5
        assert mine and mine[0][0] <= PLAN_SHARE * limit * share + 1e-9
        for j, (solve_limit, left, start_v, value) in enumerate(mine):
            # ``left`` is read just after the search read it: a little less
            assert solve_limit <= max(left * (share if j == 0 else 0.5), MIN_SOLVE_S) + 0.01
            assert value <= start_v * (1 + 1e-9)
        if k > 0:  # from the second proposal on, there is an incumbent to start from
            assert all(np.isfinite(c[2]) for c in mine)
        search.observe(p, machine.sequential(p).value)
