"""The run's best placement so far as node features (``--incumbent``)."""
import numpy as np

from envs.placement_env import EnvConfig, PlacementEnv
from hsdag_ray.core.coarsening import build_graph
from hsdag_ray.core.profile import DeviceSpec, Profile, add_modeled_device


def make_env(**kw) -> PlacementEnv:
    _, fine, _, _ = build_graph("tiny_cnn", "none")
    prof = Profile("tiny_cnn", {}, {})
    add_modeled_device(prof, fine, "SLOW", DeviceSpec(1e9, 1e9, 1e-4))
    add_modeled_device(prof, fine, "FAST", DeviceSpec(1e11, 1e11, 1e-5))
    prof.boundary_s = 1e-4
    return PlacementEnv(EnvConfig(model="tiny_cnn", backend="simulator", profile=prof.to_json(),
                                  episode_len=2, **kw))


def test_the_best_placement_so_far_is_in_the_next_episodes_observation():
    plain, env = make_env(), make_env(incumbent=True)
    n, width = env.graph.num_nodes, plain.observation_space["x"].shape[1]
    assert env.observation_space["x"].shape[1] == width + 2
    assert env.feature_names[-2:] == ["incumbent_SLOW", "incumbent_FAST"]
    first, _ = env.reset(seed=0)
    assert env.observation_space.contains(first)
    assert not first["x"][:, width:].any()  # nothing measured yet
    np.testing.assert_array_equal(first["x"][:, :width], plain.reset(seed=0)[0]["x"])

    split = np.zeros(n, dtype=np.int64)
    split[n // 2:] = 1  # faster than all on SLOW
    env.step(np.zeros(n, dtype=np.int64))
    within, *_ = env.step(split)
    assert not within["x"][:, width:].any()  # refreshed at an episode's start only
    second, _ = env.reset(seed=1)
    best = env.store.best()["placement"]
    assert best == split.tolist()
    np.testing.assert_array_equal(second["x"][:n, width:].argmax(1), split)
    assert second["x"][:n, width:].sum() == n and not second["x"][n:, width:].any()
    assert not first["x"][:, width:].any()  # an earlier episode's observation is left as it was
