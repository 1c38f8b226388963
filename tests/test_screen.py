"""The latency model of a run's profile refitted to its measurements, and the screen
(``--screen``) that leaves unmeasured the placements it says are clearly slower."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from tests.test_bad_inputs import one_error

from envs.latency_model import LatencyModel
from envs.screen import Screen
from envs.simulator import Simulator
from envs.store import MeasurementStore, placement_key
from hsdag_core.synthetic import random_cost_graph

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process


def wrong_profile():
    """A 40-node problem (the machine) and a profile with every node time off by its own
    factor exp(0.5 N(0, 1))."""
    truth = random_cost_graph(40, seed=0)
    rng = np.random.default_rng(100)
    known = dataclasses.replace(
        truth, compute_s=truth.compute_s * np.exp(0.5 * rng.standard_normal(truth.compute_s.shape)))
    return truth, known


def random_placements(n: int, count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2, size=(count, n))


def test_the_model_predicts_what_the_profile_says_before_any_measurement():
    truth, _ = wrong_profile()
    model, machine = LatencyModel(truth), Simulator(truth)
    for p in random_placements(40, 20, seed=1):
        mean, std = model.predict(p)
        assert mean == pytest.approx(machine.sequential(p).value, rel=1e-9)
        assert std > 0  # the prior is a prior


def test_measurements_correct_a_wrong_profile_and_its_uncertainty_is_honest():
    truth, known = wrong_profile()
    machine, model = Simulator(truth), LatencyModel(known)
    unseen = random_placements(40, 200, seed=2)
    actual = np.array([machine.sequential(p).value for p in unseen])

    def errors():
        pred = np.array([model.predict(p) for p in unseen])
        return np.abs(pred[:, 0] - actual) / actual, np.abs(pred[:, 0] - actual) / pred[:, 1]

    before, z_before = errors()
    for p in random_placements(40, 60, seed=3):
        assert model.add(p, machine.sequential(p).value)
    after, z_after = errors()
    assert np.median(after) < 0.5 * np.median(before)
    # calibrated: the truth lies within 2 predicted standard deviations about as often as
    # a Gaussian says (95 %), before and after measuring
    assert np.mean(z_before <= 2) > 0.85 and np.mean(z_after <= 2) > 0.85


def test_the_screen_never_leaves_out_a_placement_faster_than_the_best():
    """With the profile the machine's, only placements slower than the best are screened,
    and they are rewarded as the latency they have."""
    truth, _ = wrong_profile()
    machine, store = Simulator(truth), MeasurementStore()
    screen = Screen(truth, "g", z=1.0)
    first = np.zeros(40, dtype=np.int64)
    store.put(placement_key("g", first), machine.sequential(first).value, True, first.tolist())
    screened = 0
    for p in random_placements(40, 300, seed=4):
        screen.sync(store)
        best = store.best()["latency_s"]
        latency = machine.sequential(p).value
        guess = screen.verdict(p, best)
        if guess is None:
            store.put(placement_key("g", p), latency, True, p.tolist())
        else:
            screened += 1
            assert latency > best and guess == pytest.approx(latency, rel=1e-6)
    assert screened > 200  # random placements are mostly slower than the best so far


def test_the_screen_learns_from_the_runs_measurements_of_its_own_graph_only():
    truth, known = wrong_profile()
    machine, store = Simulator(truth), MeasurementStore()
    screen = Screen(known, "g", z=1.0)
    for k, p in enumerate(random_placements(40, 10, seed=5)):
        store.put(placement_key("g" if k % 2 else "other", p), machine.sequential(p).value,
                  True, p.tolist())
    store.put(placement_key("g", np.ones(40, dtype=np.int64)), float("inf"), False, [1] * 40)
    screen.sync(store)
    assert len(screen.model) == 5  # the other graph's and the failed one are not learned from
    screen.sync(store)
    assert len(screen.model) == 5  # each measurement is read once


@pytest.mark.slow
def test_a_screened_search_finds_at_least_as_fast_a_placement_per_measurement(tmp_path, tiny_recording):
    """Random search proposes the same placements with and without the screen; with it,
    its measurements go to the proposals that may win, so its best is as fast or faster
    (tiny_cnn has few placements: the screened run ends at the proposal cap with fewer
    than its 15 measurements), and its best is a measured latency."""
    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.training import train

    base = TrainConfig.of(model="tiny_cnn", backend="simulator", profile=str(tiny_recording("known", 3)),
                       method="random", budget=15, budget_unit="measurements", episode_len=5,
                       env_runners=0, wandb="disabled", out=str(tmp_path), exact_start="off")
    plain = train(base.replace(name="plain"), quiet=True)
    screened = train(base.replace(name="screened", screen=1.0), quiet=True)
    assert screened["method_best_latency_s"] <= plain["method_best_latency_s"]
    store = json.loads((tmp_path / "screened" / "store.json").read_text())
    measured = [e["latency_s"] for e in store["log"] if e["ok"]]
    assert len(store["log"]) <= 15 and store["screened"] > 0
    assert screened["method_best_latency_s"] == min(measured)
    rows = [json.loads(line) for line in (tmp_path / "screened" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["screened"] == store["screened"] == screened["screened"]
    assert screened["placements"] == len(store["log"]) + store["hits"] + store["screened"]


@pytest.mark.parametrize("change, says", [
    ({"method": "refit"}, "nothing to screen"),
    ({"objective": "throughput"}, "sequential objective"),
    ({"profile": ""}, "--profile FILE"),
])
def test_the_screen_says_what_it_cannot_predict(tiny_recording, change, says):
    from hsdag_ray.run.config import TrainConfig
    from hsdag_core.device_profile import Profile
    from hsdag_ray.run.resolve import screen_needs

    run = TrainConfig.of(model="tiny_cnn", screen=1.0, profile=str(tiny_recording("known", 3)))
    assert screen_needs(run, ["CPU_MODEL", "GPU_X"], Profile.load(run.env.profile).to_json()) == ""
    cfg = run.replace(**change)
    profile = Profile.load(cfg.env.profile).to_json() if cfg.env.profile else None
    assert says in screen_needs(cfg, ["CPU_MODEL", "GPU_X"], profile)
    assert screen_needs(cfg.replace(screen=0.0), ["CPU_MODEL", "GPU_X"], profile) == ""


def test_the_screen_refuses_a_run_without_a_profile_in_one_sentence(tmp_path, capsys):
    assert "--profile FILE" in one_error(capsys, "train", ["--screen", "1", "--model", "tiny_cnn",
                                                           "--backend", "auto", "--devices", "CPU,CPU_F32",
                                                           "--wandb", "disabled", "--out", tmp_path])
