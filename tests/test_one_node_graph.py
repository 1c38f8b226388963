"""HSDAG on a graph of one node: a model the coarsening keeps whole (VGG-11 under colocation
coarsening is one node) still gives a policy that learns, with finite weights."""
import numpy as np
import torch

from hsdag_ray.run.config import TrainConfig
from hsdag_ray.run.resolve import resolved
from policies.hsdag.local import LocalHSDAG, configs_from_settings


def test_hsdag_learns_the_faster_device_for_a_graph_of_one_node():
    torch.manual_seed(0)
    net_config, learn = configs_from_settings(resolved(TrainConfig.of(method="hsdag"), -1))
    assert net_config.graph_norm  # the norm that a graph of one node used to turn into NaN weights
    x = np.random.default_rng(0).random((1, 12)).astype(np.float32)
    agent = LocalHSDAG(x.shape[1], 2, np.zeros((2, 0), dtype=np.int64), net_config, learn)
    for _ in range(15):
        agent.iterate(lambda: x, lambda p: 1.0 if p[0] == 1 else 0.5)
        assert all(torch.isfinite(p).all() for p in agent.net.parameters())
    assert agent.greedy(x).tolist() == [1]
    probs = torch.stack([torch.as_tensor(agent.sample_episode(x).actions) for _ in range(5)]).float()
    assert probs.mean() > 0.8  # most placements it samples are on the faster device
