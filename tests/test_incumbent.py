"""The run's best placement so far as node features (``--incumbent``)."""
import numpy as np

from envs.placement_env import EnvConfig, PlacementEnv
from envs.store import placement_key
from envs.simulator import Simulator
from hsdag_core.coarsening import build_graph
from hsdag_core.fit import feasible
from hsdag_core.device_profile import DeviceSpec, Profile, add_modeled_device, cost_graph


def make_env(crossed: bool = False, fast_memory: float = 0.0, **kw) -> PlacementEnv:
    """``tiny_cnn`` on a slow and a fast modelled device; ``crossed``: the second half
    of the ops (in topological order) runs 1000x faster on SLOW and slower on FAST, so
    a split beats both single devices; ``fast_memory``: FAST holds only this fraction
    of the model's bytes."""
    _, fine, _, _ = build_graph("tiny_cnn", "none")
    prof = Profile("tiny_cnn", {}, {})
    add_modeled_device(prof, fine, "SLOW", DeviceSpec(1e9, 1e9, 1e-4))
    add_modeled_device(prof, fine, "FAST", DeviceSpec(1e11, 1e11, 1e-5))
    if crossed:
        for name in list(prof.op_time_s["FAST"])[len(prof.op_time_s["FAST"]) // 2:]:
            prof.op_time_s["SLOW"][name] /= 1000.0
            prof.op_time_s["FAST"][name] *= 1000.0
    prof.boundary_s = 1e-4
    if fast_memory:
        prof.mem_capacity["FAST"] = fast_memory * cost_graph(fine, prof, ["SLOW", "FAST"]).mem_bytes.sum()
    return PlacementEnv(EnvConfig(model="tiny_cnn", backend="simulator", profile=prof.to_json(),
                                  episode_len=2, **kw))


def test_the_best_placement_so_far_is_in_the_next_episodes_observation():
    # no repair, so no start the profile estimates: the run measures only its own placements
    plain, env = make_env(), make_env(incumbent=True, memory_penalty="graded")
    n, width = env.graph.num_nodes, plain.observation_space["x"].shape[1]
    assert env.observation_space["x"].shape[1] == width + 2
    assert env.feature_names[-2:] == ["incumbent_SLOW", "incumbent_FAST"]
    first, _ = env.reset(seed=0)
    assert env.observation_space.contains(first)
    assert env.store.best() is None  # nothing measured yet: the fastest single device
    np.testing.assert_array_equal(first["x"][:n, width:].argmax(1), np.ones(n))
    assert first["x"][:n, width:].sum() == n and not first["x"][n:, width:].any()
    np.testing.assert_array_equal(first["x"][:, :width], plain.reset(seed=0)[0]["x"])

    split = np.zeros(n, dtype=np.int64)
    split[n // 2:] = 1  # faster than all on SLOW, slower than all on FAST
    env.step(np.zeros(n, dtype=np.int64))
    env.step(split)
    assert env.store.best()["placement"] == split.tolist()
    second, _ = env.reset(seed=1)  # the run's best is slower than the fastest single device
    np.testing.assert_array_equal(second["x"][:n, width:].argmax(1), np.ones(n))


def test_a_measured_placement_faster_than_every_single_device_becomes_the_incumbent():
    env = make_env(crossed=True, incumbent=True)
    n, width = env.graph.num_nodes, env.observation_space["x"].shape[1] - 2
    split = np.ones(n, dtype=np.int64)
    split[n // 2:] = 0  # each half on the device that runs it fastest
    first, _ = env.reset(seed=0)
    env.step(np.zeros(n, dtype=np.int64))
    within, *_ = env.step(split)
    np.testing.assert_array_equal(within["x"], first["x"])  # refreshed at an episode's start only
    best = env.store.best()
    assert best["placement"] == split.tolist()
    assert best["latency_s"] < min(env.single_device_s.values())
    second, _ = env.reset(seed=1)
    np.testing.assert_array_equal(second["x"][:n, width:].argmax(1), split)
    assert second["x"][:n, width:].sum() == n and not second["x"][n:, width:].any()
    assert not np.array_equal(first["x"], second["x"])  # an earlier observation is left as it was


def test_with_a_small_accelerator_sampling_starts_from_as_much_on_it_as_fits():
    env = make_env(fast_memory=0.5, incumbent=True)
    n, width = env.graph.num_nodes, env.observation_space["x"].shape[1] - 2
    assert not np.isfinite(env.single_device_s["FAST"])  # FAST alone does not fit
    obs, _ = env.reset(seed=0)
    start = obs["x"][:n, width:].argmax(1)
    assert obs["x"][:n, width:].sum() == n
    assert feasible(env.limits, start)
    assert 0 < start.sum() < n  # FAST holds what fits, SLOW the rest
    sim = Simulator(env.limits)
    assert sim.sequential(start).value < 0.9 * env.single_device_s["SLOW"]


def test_the_start_is_measured_first_so_the_run_is_never_worse_than_it():
    """With the repair's start (a profile of every device), an env's first step measures
    the start as a placement of the run before the proposed one, once: the run's best is
    never worse than the placement its policy samples around."""
    env = make_env(fast_memory=0.5, incumbent=True)
    n = env.graph.num_nodes
    start = env.incumbent().copy()
    key = lambda p: placement_key(env.graph_id, np.asarray(p, dtype=np.int64))  # noqa: E731
    env.reset(seed=0)
    far = np.zeros(n, dtype=np.int64)  # SLOW alone: slower than the start
    _, _, _, _, info = env.step(far)
    log = env.store.log_since(0)
    assert [e["key"] for e in log] == [key(start), key(far)]
    assert info["latency_s"] == log[1]["latency_s"] > log[0]["latency_s"]
    assert env.store.best()["placement"] == start.tolist()
    env.step(far)
    assert len(env.store.log_since(0)) == 2  # once per env; the second proposal is a cache hit
    # a run with a measured best (resumed, or another EnvRunner's) measures no start
    again = make_env(fast_memory=0.5, incumbent=True)
    again.store = env.store
    again.reset(seed=0)
    again.step(far)
    assert len(env.store.log_since(0)) == 2
    # a run that measured another placement first (--exact-start, a pre-trained policy's
    # greedy placement) still measures its start, once, and samples around the faster
    other = make_env(fast_memory=0.5, incumbent=True)
    other.measure_array(far)
    other.reset(seed=0)
    other.step(far)
    assert [e["key"] for e in other.store.log_since(0)] == [key(far), key(start)]
    assert other.incumbent().tolist() == start.tolist()
    # without incumbent features (a method that does not sample around one) nothing extra
    plain = make_env(fast_memory=0.5)
    plain.reset(seed=0)
    plain.step(far)
    assert [e["key"] for e in plain.store.log_since(0)] == [key(far)]


def test_a_share_of_episodes_is_sampled_without_the_incumbent():
    """--incumbent-share: the other episodes see zero incumbent features (and the same
    seed draws the same episodes: RLlib resets with one seed at every sample call)."""
    def shown(share: float) -> list[bool]:
        env = make_env(incumbent=True, incumbent_share=share)
        width = env.observation_space["x"].shape[1] - 2
        out = []
        for _ in range(40):
            x = env.reset(seed=3)[0]["x"][: env.graph.num_nodes, width:]
            assert x.sum() in (0, env.graph.num_nodes)
            out.append(bool(x.any()))
        return out

    assert all(shown(1.0))
    half = shown(0.5)
    assert 8 < sum(half) < 32 and half == shown(0.5)
