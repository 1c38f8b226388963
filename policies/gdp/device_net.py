r"""GDP with devices as inputs: one network places a graph on any set of devices.

GDP's placer (:class:`~policies.gdp.policy.GDPNet`) ends in one logit per device of a
fixed list. Here, as in GiPH (Hu et al., MLSys 2023), the devices are inputs and
the network scores (node, device) pairs, so the same weights place on two, three
or four devices it never saw, of any speed and memory:

1. **Nodes.** GDP's encoder, unchanged (:meth:`GDPNet.encode`: GraphSAGE, the graph
   embedding, the segment-recurrent placer modulated by it) gives
   :math:`\mathbf{z}_v` from device-free node features.
2. **Devices.** :math:`\mathbf{e}_k = \mathrm{MLP}(\mathbf{f}_k)` from the device's
   features (:func:`hsdag_core.device_sets.device_features`: its speed per kind of
   op relative to the set's fastest device, memory, link), then a DeepSets context so
   each device knows the set it is in:
   :math:`\mathbf{e}_k \leftarrow \mathbf{e}_k + \mathrm{MLP}(\operatorname{mean}_j \mathbf{e}_j)`.
3. **Pairs.** :math:`\mathrm{logit}_{v,k} = \mathrm{MLP}([\mathrm{LN}(\mathbf{z}_v),
   \mathbf{e}_k, \mathbf{p}_{v,k}])` with :math:`\mathbf{p}_{v,k}` the pair's own
   features (:func:`hsdag_core.device_sets.pair_features`: the node's time there
   relative to its fastest device, its weights over the device's memory). One
   categorical per node over the set's devices, as GDP's one-shot placement; the last
   layer starts small so the first policy is near uniform.

No parameter depends on the number of nodes or devices.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from hsdag_core.device_sets import DEVICE_FEATURES, PAIR_FEATURES
from policies.gdp.policy import POLICY_INIT_SCALE, GDPConfig, GDPNet
from policies.layers import mlp

__all__ = ["DeviceGDPNet"]


class DeviceGDPNet(nn.Module):
    """GDP's encoder and a (node, device) pair scorer (see the module docstring).

    Args:
        num_features: node features ``F`` (device-free).
        config: GDP's settings (:class:`GDPConfig`).
        device_features: ``F_d`` per device (:data:`hsdag_core.device_sets.DEVICE_FEATURES`).
        pair_features: ``F_p`` per (node, device) pair (:data:`hsdag_core.device_sets.PAIR_FEATURES`).
    """

    def __init__(self, num_features: int, config: GDPConfig = GDPConfig(),
                 device_features: int = len(DEVICE_FEATURES),
                 pair_features: int = len(PAIR_FEATURES)) -> None:
        super().__init__()
        h = config.hidden_dim
        self.config = config
        self.encoder = GDPNet(num_features, 1, config)
        self.encoder.policy = None  # GDP's per-device head: replaced by the pair scorer
        self.device_mlp = mlp(device_features, h, h, 2)
        self.set_mlp = mlp(h, h, h, 2)
        self.pair_mlp = mlp(2 * h + pair_features, h, 1, 2)
        with torch.no_grad():
            self.pair_mlp[-1].weight.mul_(POLICY_INIT_SCALE)
            self.pair_mlp[-1].bias.zero_()

    def forward(self, x: Tensor, edge_index: Tensor, device_x: Tensor, pair_x: Tensor) -> Tensor:
        """``[n, D]`` logits of one graph's nodes on one device set.

        Args:
            x: ``[n, F]`` node features (topological order).
            edge_index: ``[2, m]`` edges.
            device_x: ``[D, F_d]`` device features.
            pair_x: ``[n, D, F_p]`` pair features.
        """
        n, d = pair_x.shape[:2]
        valid = torch.ones(1, n, dtype=torch.bool, device=x.device)
        batch = torch.zeros(n, dtype=torch.long, device=x.device)
        z, _ = self.encoder.encode(x, edge_index, batch, valid)
        z = self.encoder.out_norm(z[0])
        e = self.device_mlp(device_x)
        e = e + self.set_mlp(e.mean(0, keepdim=True))
        pairs = torch.cat([z.unsqueeze(1).expand(n, d, -1), e.unsqueeze(0).expand(n, d, -1), pair_x], -1)
        return self.pair_mlp(pairs).squeeze(-1)

    @torch.no_grad()
    def soften(self, factor: float) -> None:
        """Scales the last layer by ``factor`` (logits keep their order, lose spread)."""
        self.pair_mlp[-1].weight.mul_(factor)
        self.pair_mlp[-1].bias.mul_(factor)
