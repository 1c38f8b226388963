"""Scale-free node features (the ``relative`` group) and ``train --init`` adopting a
checkpoint's settings: what lets one policy read graphs of very different sizes alike."""
import numpy as np
import pytest

from hsdag_ray.run.config import TrainConfig
from hsdag_core.features import FeatureConfig, MAX_MEMORY_FRACTION, node_features
from hsdag_core.coarsening import build_graph
from hsdag_ray.run.pretrained import adopt_settings

SPEC = "gen:layered:n=12:c=32:w=4:seed=3"


@pytest.fixture(scope="module")
def graph():
    return build_graph(SPEC, "colocation")[2]


def _cols(x, names, prefix):
    return x[:, [k for k, nm in enumerate(names) if nm.startswith(prefix)]]


def test_relative_features_do_not_change_with_the_graphs_scale(graph):
    n = graph.num_nodes
    rng = np.random.default_rng(0)
    times = rng.uniform(1e-5, 1e-3, (n, 2))
    mem = rng.uniform(0, 1e6, n)
    cap = np.array([np.inf, mem.sum() / 2])
    cfg = FeatureConfig(relative=True)
    x, names = node_features(graph, cfg, times, mem, cap)
    # a graph 1000x slower with 1000x the weights on a device 1000x larger reads the same
    y, names2 = node_features(graph, cfg, times * 1000, mem * 1000, cap * 1000)
    assert names == names2
    for prefix in ("rel_time_dev", "log_speed_dev", "mem_of_dev", "graph_mem_of_dev"):
        a, b = _cols(x, names, prefix), _cols(y, names, prefix)
        assert a.shape[1] >= 1 and np.allclose(a, b, atol=1e-5), prefix
    # the raw cost columns do change: they are what the relative ones correct for
    assert not np.allclose(_cols(x, names, "log_ms_dev"), _cols(y, names, "log_ms_dev"))
    # which device is faster for each node, and the memory fractions of the limited device only
    assert np.allclose(_cols(x, names, "log_speed_dev1")[:, 0], np.log(times[:, 1] / times[:, 0]),
                       atol=1e-4)
    assert "mem_of_dev0" not in names and "mem_of_dev1" in names
    assert np.allclose(_cols(x, names, "mem_of_dev1")[:, 0], np.minimum(mem / cap[1], MAX_MEMORY_FRACTION),
                       atol=1e-5)
    assert np.allclose(_cols(x, names, "graph_mem_of_dev1"), 2.0)
    # off by default: the observation of every existing run stays as it was
    plain, plain_names = node_features(graph, FeatureConfig(), times, mem, cap)
    assert not any(nm.startswith("rel_") for nm in plain_names)
    assert plain.shape[1] + len([nm for nm in names if nm not in plain_names]) == x.shape[1]


def test_init_adopts_the_checkpoints_settings_the_run_left_at_default():
    ckpt = {"settings": {"relative": True, "hidden_dim": 32, "num_gcn_layers": 3},
            "reward": "speedup"}
    cfg = adopt_settings(TrainConfig.of(init="x", num_gcn_layers=4), ckpt)
    assert cfg.features.relative is True and cfg.hsdag.hidden_dim == 32 and cfg.learning.reward == "speedup"
    assert cfg.hsdag.num_gcn_layers == 4  # set by the run: kept (and refused later if the shapes differ)
    assert adopt_settings(TrainConfig.of(reward="inverse"), ckpt).learning.reward == "inverse"
