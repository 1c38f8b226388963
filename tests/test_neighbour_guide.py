"""Untried neighbours of the run's best measured as a learned run's own (``--neighbour-every``)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from tests.test_bad_inputs import one_error

from envs.placement_env import EnvConfig, PlacementEnv
from envs.store import placement_key
from hsdag_core.device_profile import Profile
from policies.search.neighbour_guide import NeighbourGuide

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process


def make_env(profile_path, **kw) -> PlacementEnv:
    return PlacementEnv(EnvConfig(model="tiny_cnn", backend="simulator",
                                  profile=Profile.load(profile_path).to_json(), episode_len=3, **kw))


def _put(env, p, latency):
    env.store.put(placement_key(env.graph_id, p), latency, True, np.asarray(p).tolist())


def _drain(env) -> list[list[int]]:
    out = []
    while (p := env.store.take_suggestion(env.graph_id)) is not None:
        out.append(p)
    return out


def test_the_guide_queues_each_untried_single_change_of_the_best_then_edge_changes(tiny_recording):
    env = make_env(tiny_recording("known", 3), measure_reference=False)
    n = env.graph.num_nodes
    best = np.zeros(n, dtype=np.int64)
    _put(env, best, 1e-3)
    tried = best.copy()
    tried[2] = 1
    _put(env, tried, 2e-3)  # measured before the guide: never queued
    _put(env, np.ones(n, dtype=np.int64), 5e-3)
    guide = NeighbourGuide(env, env.store, every=2, seed=0)
    assert guide.after_iteration() == 0  # nothing proposed since the guide started
    queued = []
    while len(queued) < n:  # each round: two placements proposed in the run
        env.store.get(placement_key(env.graph_id, best))
        env.store.get(placement_key(env.graph_id, best))
        count = guide.after_iteration()
        got = _drain(env)
        assert len(got) == count
        for p in got:
            _put(env, p, 3e-3)  # measured, slower than the best
        queued += got
    diffs = [np.nonzero(np.asarray(p) != best)[0].tolist() for p in queued[:n]]
    # every single change of the best once, but the one measured before
    assert all(len(d) == 1 for d in diffs[:n - 1])
    assert sorted(d[0] for d in diffs[:n - 1]) == [v for v in range(n) if v != 2]
    # then both ends of an edge
    changed = diffs[n - 1]
    edges = {tuple(sorted(e)) for e in np.asarray(env.graph.edge_index()).T.tolist()}
    assert len(changed) == 2 and tuple(changed) in edges
    assert len({tuple(p) for p in queued}) == len(queued)


def test_a_new_best_restarts_the_neighbours_around_it(tiny_recording):
    env = make_env(tiny_recording("known", 3), measure_reference=False)
    n = env.graph.num_nodes
    _put(env, np.zeros(n, dtype=np.int64), 2e-3)
    guide = NeighbourGuide(env, env.store, every=2, seed=1, ranked=False)  # single changes only
    better = np.zeros(n, dtype=np.int64)
    better[[0, 1]] = 1
    _put(env, better, 1e-3)  # counts 1 placement; with a hit, 2: one neighbour of the new best
    env.store.get(placement_key(env.graph_id, better))
    assert guide.after_iteration() == 1
    [p] = _drain(env)
    assert int((np.asarray(p) != better).sum()) == 1
    # several due at once: that many, all different, none measured
    for _ in range(6):
        env.store.get(placement_key(env.graph_id, better))
    assert guide.after_iteration() == 3
    got = _drain(env)
    keys = {placement_key(env.graph_id, np.asarray(q)) for q in got}
    assert len(keys) == 3 and placement_key(env.graph_id, np.asarray(p)) not in keys
    assert guide.proposed == 4


def _queued(path, best, put=None, ranked=True, rounds=2) -> list[np.ndarray]:
    """What a fresh guide queues around ``best`` (measured at 1 ms, or by ``put(env)``)
    after ``rounds`` times the graph's nodes placements proposed, in its order."""
    env = make_env(path, measure_reference=False)
    n = env.graph.num_nodes
    if put is None:
        _put(env, best, 1e-3)
    else:
        put(env)
    guide = NeighbourGuide(env, env.store, every=2, seed=0, ranked=ranked)
    for _ in range(rounds * n):
        env.store.get(placement_key(env.graph_id, best))
    guide.after_iteration()
    return [np.asarray(p) for p in _drain(env)]


def _all_singles(path, put, ranked=True) -> np.ndarray:
    """The single changes of the all-device-0 best that a fresh guide queues, in its order,
    after ``put(env)`` has measured what it likes (the refitted optimum, queued first, is
    one of them or not)."""
    n = make_env(path, measure_reference=False).graph.num_nodes
    got = _queued(path, np.zeros(n, dtype=np.int64), put, ranked, rounds=3)  # past the optimum
    return np.asarray([p for p in got if np.count_nonzero(p) == 1])


def _measured_on(path):
    """``put``: measure the all-device-0 placement as the profile's simulator does."""
    from envs.simulator import Simulator
    from envs.baselines import profile_costs

    def put(env):
        sim = Simulator(profile_costs(env))
        best = np.zeros(env.graph.num_nodes, dtype=np.int64)
        _put(env, best, sim.sequential(best).value)
        return sim
    return put


def test_with_a_profile_the_neighbours_come_in_the_order_of_its_estimate(tiny_recording):
    from envs.simulator import Simulator
    from envs.baselines import profile_costs

    path = tiny_recording("known", 3)
    got = _all_singles(path, _measured_on(path))  # a measurement the profile predicts exactly
    env = make_env(path, measure_reference=False)
    est = [Simulator(profile_costs(env)).sequential(p).value for p in got]
    assert len(got) == env.graph.num_nodes and est == sorted(est) and est[0] < est[-1]
    rand = _all_singles(path, _measured_on(path), ranked=False)  # the same ones, in a random order
    assert sorted(map(tuple, rand)) == sorted(map(tuple, got)) and rand.tolist() != got.tolist()


def test_the_refitted_profiles_own_optimum_comes_first_unless_measured(tiny_recording, tmp_path):
    from envs.simulator import Simulator
    from envs.baselines import profile_costs
    from policies.solvers.exact import exact_method, solve

    prof = Profile.load(tiny_recording("known", 3))
    env = make_env(tiny_recording("known", 3), measure_reference=False)
    weights = profile_costs(env).mem_bytes
    prof.mem_capacity["GPU_X"] = float(weights.sum()) * 0.5  # the optimum is a split
    path = tmp_path / "half.json"
    prof.save(path)
    costs = profile_costs(make_env(path, measure_reference=False))
    optimum = solve(costs, "sequential", exact_method(costs, "sequential"))
    n = costs.num_nodes
    got = _queued(path, np.zeros(n, dtype=np.int64), _measured_on(path))
    sim = Simulator(costs)
    assert sim.sequential(got[0]).value == pytest.approx(optimum.value, rel=1e-9)
    assert np.count_nonzero(got[0]) > 1  # not a neighbour: the exchange no single change makes
    assert len({tuple(p) for p in got}) == len(got)  # nothing queued twice
    # measured already (here: it is the best, at its estimate): its single changes and swaps
    best = np.asarray(optimum.placement, dtype=np.int64)
    again = _queued(path, best, lambda e: _put(e, best, sim.sequential(best).value))
    assert again and all(1 <= np.count_nonzero(p != best) <= 2 for p in again[:n])


def test_the_order_follows_the_profile_refitted_to_the_runs_measurements(tiny_recording):
    """A measurement slower than the profile says, of a placement moving the node the profile
    ranks first, moves that node's single change down the order."""
    path = tiny_recording("known", 3)
    first = int(np.nonzero(_all_singles(path, _measured_on(path))[0])[0][0])

    def put(env):
        sim = _measured_on(path)(env)
        p = np.zeros(env.graph.num_nodes, dtype=np.int64)
        p[first] = 1
        p[(first + 1) % p.size] = 1
        _put(env, p, 3 * sim.sequential(p).value)
    after = [int(np.nonzero(p)[0][0]) for p in _all_singles(path, put)]
    assert after[0] != first and after.index(first) > 0


def test_a_single_change_that_does_not_fit_gives_way_to_its_swaps(tiny_recording, tmp_path):
    """The accelerator holds one node of two: moving the other on overflows, exchanging them
    fits; the guide queues the exchanges, ranked with the single changes that fit."""
    from envs.baselines import profile_costs
    from hsdag_core.fit import feasible

    prof = Profile.load(tiny_recording("known", 3))
    env = make_env(tiny_recording("known", 3), measure_reference=False)
    w = profile_costs(env).mem_bytes
    a, b = (int(i) for i in np.argsort(w)[::-1][:2])  # the two largest blocks of weights
    prof.mem_capacity["GPU_X"] = float(w[a]) * 1.01
    path = tmp_path / "one.json"
    prof.save(path)
    env = make_env(path, measure_reference=False)
    limits, n = profile_costs(env), env.graph.num_nodes
    best = np.zeros(n, dtype=np.int64)
    best[a] = 1
    got = _queued(path, best, rounds=4)
    assert all(feasible(limits, p) for p in got)
    swap = best.copy()
    swap[[a, b]] = [0, 1]
    assert any((p == swap).all() for p in got)
    changed = [tuple(np.nonzero(p != best)[0]) for p in got]
    singles = [c for c in changed if len(c) == 1]
    swaps = [c for c in changed if len(c) == 2 and a in c]
    assert singles and len(swaps) >= 1 and len(singles) + len(swaps) <= len(got)
    # without the profile's order no swaps: a random order of single changes only
    assert all(int((p != best).sum()) == 1 for p in _queued(path, best, ranked=False))


def test_neighbours_the_profile_says_do_not_fit_are_left_out_unless_too_many_to_rank(
        tiny_recording, tmp_path, monkeypatch):
    import policies.search.neighbour_guide as ng
    from envs.baselines import profile_costs
    from hsdag_core.fit import feasible

    prof = Profile.load(tiny_recording("known", 3))
    env = make_env(tiny_recording("known", 3), measure_reference=False)
    weights = profile_costs(env).mem_bytes
    prof.mem_capacity["GPU_X"] = float(np.sort(weights)[-2]) * 0.99  # the largest do not fit
    path = tmp_path / "small.json"
    prof.save(path)
    n = env.graph.num_nodes

    def queued(ranked: bool) -> np.ndarray:
        return _all_singles(path, lambda e: _put(e, np.zeros(n, dtype=np.int64), 1e-3), ranked)

    limits = profile_costs(make_env(path, measure_reference=False))
    ranked, plain = queued(True), queued(False)  # unranked: every single change
    assert len(plain) == n
    fitting = sorted(tuple(p) for p in plain if feasible(limits, p))
    assert 0 < len(fitting) < n and sorted(map(tuple, ranked)) == fitting
    monkeypatch.setattr(ng, "RANK_WORK", 0)  # too many to estimate: the random order
    assert queued(True).tolist() == plain.tolist()


def test_hsdag_with_untried_neighbours_measures_each_as_the_runs_own(tmp_path, tiny_recording):
    """A real run: the guide's neighbours are measured, counted and all new placements."""
    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.training import train

    cfg = TrainConfig.of(model="tiny_cnn", backend="simulator", profile=str(tiny_recording("known", 3)),
                      method="hsdag", budget=30, episode_len=5, env_runners=0, wandb="disabled",
                      out=str(tmp_path), name="guided", neighbour_every=3)
    s = train(cfg, quiet=True)
    log = json.loads((tmp_path / "guided" / "store.json").read_text())["log"]
    suggested = [e["placement"] for e in log if e.get("suggested")]
    assert s["suggested"] == len(suggested) >= 5 and s["suggested_by"] == "neighbours"
    keys = [e["key"] for e in log]
    assert len(set(keys)) == len(keys)  # every measurement a new placement
    assert s["method_best_latency_s"] <= min(e["latency_s"] for e in log if e["ok"]) * (1 + 1e-9)


@pytest.mark.parametrize("args, says", [
    (["--neighbour-every", "1"], "at least 2"),
    (["--neighbour-every", "4", "--refit-every", "4"], "use one of them"),
])
def test_untried_neighbours_refuse_in_one_sentence(tmp_path, capsys, args, says):
    assert says in one_error(capsys, "train", ["--model", "tiny_cnn", "--backend", "simulator",
                                               "--wandb", "disabled", "--out", tmp_path, *args])


@pytest.mark.parametrize("change, every", [
    ({}, 0),  # the default: every method as published
    ({"guide": True}, "auto"),
    ({"guide": True, "method": "random"}, "auto"),  # the guide helps every method alike
    ({"guide": True, "method": "placeto"}, "auto"),
    ({"neighbour_every": 4}, 4),
    ({"guide": True, "neighbour_every": 0}, 0),
    ({"guide": True, "refit_every": 4, "profile": "p.json"}, 0),
])
def test_untried_neighbours_are_on_with_the_guide(change, every):
    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.resolve import NEIGHBOUR_EVERY, env_config, neighbour_every

    every = NEIGHBOUR_EVERY if every == "auto" else every
    cfg = TrainConfig.of(model="tiny_cnn").replace(**change)
    if not cfg.guide.refit_every:
        cfg.validate()
    assert neighbour_every(cfg) == every
    on = env_config(cfg, "simulator", ["CPU_MODEL", "GPU_MODEL"], None, "")["suggestions"]
    assert on == (every > 0 or cfg.guide.refit_every > 0)


def test_the_help_gives_the_auto_value(capsys):
    from hsdag_ray.run.resolve import NEIGHBOUR_EVERY
    from hsdag_ray.train import main

    try:
        main(["--method", "hsdag", "--help"])
    except SystemExit:  # argparse's way of ending after the help
        pass
    assert f"-1: {NEIGHBOUR_EVERY} with guide" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("order", ["profile", "random"])
def test_the_run_orders_its_neighbours_by_the_profile_unless_told_random(order, tiny_recording):
    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.resolved_run import resolve_run
    from hsdag_ray.run.training import _guide

    path = tiny_recording("known", 3)
    env = make_env(path, measure_reference=False)
    cfg = TrainConfig.of(model="tiny_cnn", backend="simulator", profile=str(path), neighbour_order=order,
                      guide=True)
    cfg.validate()
    guide = _guide(resolve_run(cfg, lambda _: None), env, env.store)
    assert isinstance(guide, NeighbourGuide) and (guide.model is not None) == (order == "profile")


def test_an_unknown_neighbour_order_is_refused_in_one_sentence(tmp_path, capsys):
    error = one_error(capsys, "train", [
        "--model", "tiny_cnn", "--wandb", "disabled", "--out", tmp_path, "--neighbour-order", "fastest"])
    assert "--neighbour-order" in error and "'fastest'" in error and "'profile', 'random'" in error
