"""Placeto's MDP on a recorded profile: rewards, episode length, placements counted, features."""
import math

import networkx as nx
import numpy as np
import pytest

from envs.placeto_env import PlacetoEnv
from envs.simulator import Simulator
from hsdag_core.device_profile import Profile, cost_graph


@pytest.fixture(scope="module")
def profile() -> Profile:
    from envs.profiling import record

    prof = record("tiny_cnn", ["CPU"], ["GPU_MODEL"], fit=0, progress=False)
    prof.boundary_s = 5e-4  # as the default profile: splitting is not free
    return prof


def make_env(profile: Profile, **kw) -> PlacetoEnv:
    cfg = {"model": "tiny_cnn", "backend": "simulator", "profile": profile.to_json()}
    cfg.update(kw)
    return PlacetoEnv(cfg)


def test_reward_is_the_runtime_improvement_and_each_evaluation_one_placement(profile):
    env = make_env(profile, passes=2)
    n = env.graph.num_nodes
    assert env.steps_per_episode == 2 * n
    # an independent simulator of the same costs
    sim = Simulator(cost_graph(env.graph, profile, env.devices))
    value = lambda p: sim.evaluate(p, "sequential").value  # noqa: E731
    rng = np.random.default_rng(0)
    seen: set = set()
    done = 0
    for episode in range(2):
        obs, _ = env.reset()
        placement = env.initial_placement.copy()
        prev = value(placement)
        assert prev == pytest.approx(env.initial_runtime_s)
        total = 0.0
        for t in range(env.steps_per_episode):
            node = int(obs["current"][0])
            assert node == t % n  # tiny_cnn's nodes are numbered in topological order
            action = int(rng.integers(0, 2))
            obs, reward, terminated, truncated, info = env.step(action)
            placement[node] = action
            cur = value(placement)
            assert info["node"] == node and info["ok"]
            assert reward == pytest.approx((prev - cur) / env.reference_s, rel=1e-9, abs=1e-12)
            assert info["cached"] == (tuple(placement) in seen)
            seen.add(tuple(placement))
            done += 1
            stats = env.store.stats()
            # every evaluation is one placement of the run; only new ones are measured
            assert stats["placements"] == done and stats["measurements"] == len(seen)
            assert terminated == (t == env.steps_per_episode - 1) and not truncated
            total += reward
            prev = cur
        assert total == pytest.approx((value(env.initial_placement) - prev) / env.reference_s)
    # the reference is the best single device, as for HSDAG
    assert env.reference_s == min(env.single_device_s.values())


def test_a_failed_placement_is_evaluated_as_a_slow_one(profile):
    limited = Profile.from_json(profile.to_json())
    limited.mem_capacity = {"GPU_MODEL": 1.0}  # one byte: no node with weights fits there
    env = make_env(limited, failure_factor=10.0, passes=2, memory_penalty="graded")
    n = env.graph.num_nodes
    env.reset()
    prev = env.initial_runtime_s
    failed = 0
    # first pass: everything to the accelerator (fails once a weighted node is there);
    # second pass: everything back to the CPU
    for t in range(env.steps_per_episode):
        _, reward, _, _, info = env.step(1 if t < n else 0)
        if info["ok"]:
            assert info["runtime_s"] == info["latency_s"]
        else:
            failed += 1
            assert info["stage"] == "memory" and math.isnan(info["latency_s"])
            assert info["runtime_s"] >= 10.0 * env.reference_s
        assert reward == pytest.approx((prev - info["runtime_s"]) / env.reference_s)
        prev = info["runtime_s"]
    assert failed >= n // 2
    assert prev == pytest.approx(env.single_device_s["CPU"])


def test_observation_holds_placeto_features(profile):
    env = make_env(profile, max_nodes=12, max_edges=20)
    n, D = env.graph.num_nodes, len(env.devices)
    obs, _ = env.reset()
    for action in (1, 0, 1):
        assert env.observation_space.contains(obs)
        obs, *_ = env.step(action)
    names = env.feature_names
    x = obs["x"]
    assert names[:2] == ["log_ms_CPU", "log_ms_GPU_MODEL"]
    on = x[:n, names.index("on_CPU"):names.index("on_CPU") + D]
    assert np.array_equal(on.argmax(1), env.placement) and np.all(on.sum(1) == 1)
    assert np.array_equal(x[:n, names.index("visited")], [1, 1, 1] + [0] * (n - 3))
    cur = int(obs["current"][0])
    assert cur == 3 and np.flatnonzero(x[:, names.index("current")]).tolist() == [3]
    sim = Simulator(cost_graph(env.graph, profile, env.devices))
    starts = sim.start_times(env.placement, "sequential") / env.reference_s
    assert np.allclose(x[:n, names.index("start_time")], starts, rtol=1e-5)
    assert np.all(x[n:] == 0)  # padded rows
    g = env.graph.to_networkx()  # nodes numbered as in the graph
    assert set(np.flatnonzero(obs["ancestors"]).tolist()) == nx.ancestors(g, cur)
    assert set(np.flatnonzero(obs["descendants"]).tolist()) == nx.descendants(g, cur)
    assert nx.ancestors(g, cur) and nx.descendants(g, cur)  # a node in the middle


def test_without_cost_features_no_profiled_time_is_seen(profile):
    slower = Profile.from_json(profile.to_json())
    slower.op_time_s = {d: {op: 3 * t for op, t in times.items()}
                        for d, times in profile.op_time_s.items()}
    off = [make_env(p, features={"cost": False}) for p in (profile, slower)]
    on = [make_env(p) for p in (profile, slower)]
    assert "log_mflops" in off[0].feature_names and not any(
        f.startswith("log_ms_") for f in off[0].feature_names)
    assert np.array_equal(off[0]._static, off[1]._static)  # FLOPs and bytes only
    assert not np.array_equal(on[0]._static, on[1]._static)  # profiled times
