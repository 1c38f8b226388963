"""The placement environment and the run's measurement store."""
import math

import numpy as np
import pytest

from envs.placement_env import EnvConfig, PlacementEnv, reward_of
from envs.store import MeasurementStore, placement_key
from hsdag_core.coarsening import build_graph
from hsdag_core.device_profile import DeviceSpec, Profile, add_modeled_device

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process


@pytest.fixture(scope="module")
def profile() -> dict:
    _, fine, _, _ = build_graph("tiny_cnn", "none")
    prof = Profile("tiny_cnn", {}, {})
    add_modeled_device(prof, fine, "SLOW", DeviceSpec(1e9, 1e9, 1e-4))
    # fast but holds only a third of the weights
    weights = sum(n.weight_bytes for n in fine.nodes)
    add_modeled_device(prof, fine, "FAST", DeviceSpec(1e11, 1e11, 1e-5, memory_bytes=weights / 3))
    prof.boundary_s = 1e-4
    return prof.to_json()


def make_env(profile, **kw) -> PlacementEnv:
    return PlacementEnv(EnvConfig(model="tiny_cnn", backend="simulator", profile=profile,
                                  episode_len=3, **kw))


def test_env_api_rewards_cache_and_failures(profile):
    env = make_env(profile, reward="speedup", memory_penalty="graded")
    obs, _ = env.reset(seed=0)
    # (gymnasium's check_env demands equal infos for equal steps: a measuring env's
    # info tells cache hits and timings apart, so the spaces are checked directly)
    assert env.observation_space.contains(obs)
    assert env.action_space.contains(env.action_space.sample())
    n = env.graph.num_nodes
    assert obs["x"].shape[0] == n and obs["node_mask"].sum() == n
    assert env.single_device_s["FAST"] == math.inf and env.reference_s == env.single_device_s["SLOW"]
    slow = np.zeros(n, dtype=np.int64)
    _, r, term, _, info = env.step(slow)
    assert info["ok"] and not info["cached"] and r == pytest.approx(1.0) and not term
    _, r2, _, _, info = env.step(slow)
    assert info["cached"] and r2 == r
    _, r3, term, _, info = env.step(np.ones(n, dtype=np.int64))  # breaks FAST's memory
    assert not info["ok"] and info["stage"] == "memory" and term
    # graded by how far over the memory limit the placement is
    assert info["memory_over"] > 0
    assert r3 == pytest.approx(reward_of(10 * env.reference_s * (1 + info["memory_over"]), "speedup",
                                         env.reference_s))
    assert env.store.stats()["failures"] == 1 and env.store.stats()["placements"] == 3
    flat = make_env(profile, reward="speedup", memory_penalty="flat")
    flat.reset(seed=0)
    _, r4, _, _, _ = flat.step(np.ones(n, dtype=np.int64))
    assert r4 == pytest.approx(reward_of(10 * env.reference_s, "speedup", env.reference_s))


def test_repair_measures_the_repaired_placement_of_one_that_overflows(profile):
    from hsdag_core.fit import feasible, repair

    env = make_env(profile, reward="speedup", memory_penalty="repair")
    env.reset(seed=0)
    n = env.graph.num_nodes
    fast = np.ones(n, dtype=np.int64)  # breaks FAST's memory
    assert not feasible(env.limits, fast)
    fixed = repair(env.limits, fast)
    assert feasible(env.limits, fixed) and (fixed == 1).any()
    _, r, _, _, info = env.step(fast)
    assert info["ok"] and env.store.stats()["failures"] == 0
    [logged] = env.store.log_since(0)
    assert logged["key"] == placement_key(env.graph_id, fixed)
    assert r == pytest.approx(reward_of(env.measure_untracked(fixed).latency_s, "speedup", env.reference_s))
    # a placement that fits is measured as it is
    slow = np.zeros(n, dtype=np.int64)
    env.step(slow)
    assert env.store.log_since(1)[0]["key"] == placement_key(env.graph_id, slow)


def test_a_sim_profile_is_what_is_measured_and_the_profile_what_the_run_knows(profile):
    """--sim-profile: the simulator plays a machine the run's profile describes wrongly
    (here: SLOW twice as slow, FAST with no memory limit); features, the repair and
    the start still come from the run's profile, every latency from the machine."""
    _, fine, _, _ = build_graph("tiny_cnn", "none")
    machine = Profile("tiny_cnn", {}, {})
    add_modeled_device(machine, fine, "SLOW", DeviceSpec(5e8, 5e8, 2e-4))
    add_modeled_device(machine, fine, "FAST", DeviceSpec(1e11, 1e11, 1e-5))
    machine.boundary_s = 1e-4
    machine = machine.to_json()
    env = make_env(profile, sim_profile=machine, memory_penalty="repair", incumbent=True)
    known, truth = make_env(profile, incumbent=True), make_env(machine)
    assert env.single_device_s == pytest.approx(truth.single_device_s)
    assert env.single_device_s["SLOW"] > 1.5 * known.single_device_s["SLOW"]
    assert math.isfinite(env.single_device_s["FAST"]) and known.single_device_s["FAST"] == math.inf
    assert np.array_equal(env.reset(seed=0)[0]["x"], known.reset(seed=0)[0]["x"])
    # all on FAST fits the machine, but the run's profile says it does not: it is repaired
    n = env.graph.num_nodes
    from hsdag_core.fit import repair

    fixed = repair(env.limits, np.ones(n, dtype=np.int64))
    assert (fixed == 0).any()
    m, _ = env.measure_array(np.ones(n, dtype=np.int64))
    [logged] = env.store.log_since(0)
    assert m.ok and logged["key"] == placement_key(env.graph_id, fixed)
    assert m.latency_s == pytest.approx(truth.measure_untracked(fixed).latency_s)
    assert m.latency_s != pytest.approx(known.measure_untracked(fixed).latency_s)
    with pytest.raises(ValueError, match="simulator"):
        EnvConfig.from_dict({"model": "tiny_cnn", "backend": "pipeline", "sim_profile": machine})


def test_rewards():
    assert reward_of(0.5, "inverse", 1.0) == 2.0
    assert reward_of(0.5, "speedup", 2.0) == 4.0
    assert reward_of(math.e, "neg_log", 1.0) == pytest.approx(-1.0)
    with pytest.raises(ValueError):
        reward_of(1.0, "fast", 1.0)
    with pytest.raises(ValueError, match="unknown environment setting"):
        EnvConfig.from_dict({"modle": "x"})


def test_store_best_log_and_state():
    s = MeasurementStore()
    k1, k2 = placement_key("g", np.array([0, 1])), placement_key("g", np.array([1, 1]))
    assert k1 != k2 and k1 == placement_key("g", [0, 1])
    assert s.put(k1, 2.0, True, [0, 1]) and not s.put(k2, math.inf, False, [1, 1], {"stage": "memory"})
    assert s.get(k1)["latency_s"] == 2.0 and s.get("g:none") is None
    assert s.best()["placement"] == [0, 1]
    assert s.stats() == {"measurements": 2, "failures": 1, "cache_hits": 1, "placements": 3,
                         "feasible_placements": 2, "best_latency_s": 2.0, "screened": 0,
                         "suggested": 0}
    s.count_screened()  # a placement proposed, predicted slower, not measured
    assert s.stats() == {"measurements": 2, "failures": 1, "cache_hits": 1, "placements": 4,
                         "feasible_placements": 3, "best_latency_s": 2.0, "screened": 1,
                         "suggested": 0}
    assert [(e["key"], e["placement"]) for e in s.log_since(1)] == [(k2, [1, 1])]
    t = MeasurementStore()
    t.set_state(s.get_state())
    assert t.stats() == s.stats() and t.best() == s.best()


def test_reference_without_any_feasible_single_device_or_split_is_estimated(profile):
    """Both devices too small for the model and for half of it: the reference of
    rewards is the simulator's single-device latency without memory limits, not
    a silent 1.0 s, and the environment says so."""
    _, fine, _, _ = build_graph("tiny_cnn", "none")
    prof = Profile("tiny_cnn", {}, {})
    tiny = sum(n.weight_bytes for n in fine.nodes) / 10
    add_modeled_device(prof, fine, "A", DeviceSpec(1e9, 1e9, 1e-4, memory_bytes=tiny))
    add_modeled_device(prof, fine, "B", DeviceSpec(1e11, 1e11, 1e-5, memory_bytes=tiny))
    env = make_env(prof.to_json())
    assert all(math.isinf(t) for t in env.single_device_s.values())
    assert env.reference_kind == "estimate_without_memory_limits"
    n = env.graph.num_nodes
    expected = min(env.backend.sim.sequential(np.full(n, d)).value for d in range(2))
    assert env.reference_s == pytest.approx(expected) and env.reference_s < 0.5


from envs.base import Backend  # noqa: E402


class _Flaky(Backend):
    """A backend that times out once per placement, then measures (a busy machine)."""

    def __init__(self, inner):
        self.inner, self.name, self.devices, self.seen = inner, inner.name, inner.devices, set()

    def measure(self, placement, race=False):
        return self.measure_array(self.inner.sim.graph.placement_from_names(placement))

    def measure_array(self, p, race=False):
        from envs.base import Measurement

        key = tuple(int(x) for x in p)
        if key not in self.seen:
            self.seen.add(key)
            return Measurement.failure(self.name, "timeout", "took longer than 0.1 s")
        return self.inner.measure_array(p)


def test_transient_failures_are_not_cached_deterministic_ones_are(profile):
    env = make_env(profile, memory_penalty="graded")  # an overflowing placement is measured
    env.backend = _Flaky(env.backend)
    n = env.graph.num_nodes
    p = np.zeros(n, dtype=np.int64)
    m, cached = env.measure_array(p)
    assert not m.ok and m.stage == "timeout" and not cached
    m, cached = env.measure_array(p)  # measured again, not read from the cache
    assert m.ok and not cached
    m, cached = env.measure_array(p)
    assert m.ok and cached
    # a memory failure says something about the placement: cached
    over = np.ones(n, dtype=np.int64)
    env.backend.seen.add(tuple(over))
    m1, c1 = env.measure_array(over)
    m2, c2 = env.measure_array(over)
    assert m1.stage == m2.stage == "memory" and not c1 and c2


def test_errors_of_a_measuring_env_reach_the_run_store(profile):
    import ray

    from envs.store import StoreClient, store_actor

    started = not ray.is_initialized()
    if started:
        ray.init(address="local", include_dashboard=False, log_to_driver=False, configure_logging=False, num_cpus=1)
    try:
        store = StoreClient(store_actor("test_errors_store"))
        store.stats()  # registered before the environment connects
        env = make_env(profile, store="test_errors_store")

        def broken(p, race=False):
            raise ZeroDivisionError("a bug in the measuring code")

        env.backend.measure_array = broken
        env.reset()
        with pytest.raises(ZeroDivisionError):
            env.step(np.zeros(env.graph.num_nodes, dtype=np.int64))
        errors = store.errors()
        assert errors and "ZeroDivisionError while measuring a placement" in errors[-1]
        assert "a bug in the measuring code" in errors[-1]
        # a bad configuration on a worker is reported too
        with pytest.raises(Exception):
            make_env(profile, store="test_errors_store", devices=("SLOW", "NOPE"))
        assert "while building the environment" in store.errors()[-1]
    finally:
        if started:
            ray.shutdown()
