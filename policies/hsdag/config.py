"""The sizes and switches of the HSDAG network (:mod:`policies.hsdag.policy`), read from an
RLModule's ``model_config``; the reasons behind the defaults are in :mod:`policies.hsdag.policy`."""
from __future__ import annotations

import dataclasses
from typing import Any, Literal, get_args

__all__ = ["HSDAGConfig", "Pooling", "POOLINGS"]

#: how a group's embedding pools its nodes' (:class:`policies.hsdag.graph_parsing.GraphParsingPool`)
Pooling = Literal["mean", "sum"]
POOLINGS: tuple[str, ...] = get_args(Pooling)


@dataclasses.dataclass(frozen=True)
class HSDAGConfig:
    r"""Sizes and switches of the HSDAG network (read from an RLModule's ``model_config``).

    Attributes:
        hidden_dim: width ``H`` of node, group and graph embeddings.
        num_gcn_layers: number ``K`` of GCN layers after the input MLP.
        score_layers: layers of the edge-scoring MLP (1 = a linear scorer).
        placer_layers: layers of the placer MLP (group embedding -> D logits).
        pooled_gcn: run one GCN layer over the pooled graph ``A'`` before the placer.
        node_state_update: carry the node state ``Z + Z'`` between the steps of an
            episode (as RLlib module state); ``False`` makes the module stateless.
        reuse_sampled_grouping: in ``forward_train``, group nodes as they were
            grouped when the action was sampled (read from the stored
            ``Columns.ACTION_DIST_INPUTS``), so ``logp`` is the one of the sampled
            group decisions.
        pooling: ``"mean"`` (score-gated mean of a group's node states) or
            ``"sum"`` (the literal :math:`\\mathbf{S}^\\top(\\mathbf{Z} \\odot \\mathbf{n})`,
            whose scale grows with the group; see the module docstring).
        graph_norm: a GraphNorm after the input MLP and after every GCN layer.
        group_norm: a LayerNorm on the group embeddings before the placer.
        grouping_noise: scale of the Gumbel noise added to the edges' score
            logits when sampling (``forward_exploration``) before the dominant
            edges are chosen; ``0`` parses exactly as at inference.
        self_loops: every node also scores its own loop
            :math:`\sigma(\mathrm{MLP}(\mathbf{z}_v \odot \mathbf{z}_v))` and may
            choose it as its dominant edge, so single-node groups can be
            parsed (see "What a grouping can express" in the module docstring).
        node_moves: every node also gets a move logit (a head on its node
            state, starting at about one moving node per placement), and a
            sampled node may leave its group's device
            (:mod:`policies.hsdag.move_distribution`), so every placement can be sampled.
        prior_device: a device index whose logit starts ``prior_logit`` above the
            others' in every group (a constant added to the placer's output, e.g.
            the fastest single device, so sampling starts around it and the
            placer learns how far to move from it); ``-1`` = none.
        prior_logit: that head start.
        sampled_grouping: when sampling, every node draws its dominant edge from
            the softmax of its incident edges' score logits at temperature
            ``grouping_noise`` and the draw's log-probability joins the
            placement's, so REINFORCE trains the edge scorer on the reward
            (:func:`policies.hsdag.graph_parsing.sample_partners`).
        move_floor: with ``node_moves``, every node of a graph of ``n`` nodes moves
            with probability at least ``move_floor / n``: the learned move
            probability ``q`` becomes ``(1 - e) q + e`` with ``e = move_floor / n``
            (an exact mixture, so ``logp`` stays that of what is sampled). A policy
            that has settled on a placement then still samples it with about
            ``move_floor`` nodes changed, the neighbours a local search tries, instead
            of proposing the same placement again; ``0`` = the learned probability alone.
        incumbent_prior: sample around the run's best placement so far, which the
            observation carries as its last ``D`` node features (``incumbent``
            features: the fastest single device, measured as the reward's reference,
            until a measured placement beats it). The device on which the
            incumbent puts most of a group's nodes gets ``incumbent_prior`` added to
            the group's logit, and with ``node_moves`` a node the incumbent places
            apart from that majority gets its move logit raised by ``incumbent_prior``
            plus the move prior's ``log(n - 1)``. With untrained heads on two devices a
            group then keeps the incumbent's majority with probability
            ``sigmoid(incumbent_prior)`` and a node apart from it returns to its own
            device with about the same: the proposals are the incumbent with a few
            changes, which the policy learns to steer. The priors are functions of the
            observation, so ``logp`` stays exact; ``0`` = off.
        incumbent_flips: with ``incumbent_prior``, a group leans to the incumbent by at
            least :math:`\log((D - 1) G / F)` on a graph of ``G`` groups (``F`` = this
            value), so an untrained policy changes about ``F`` groups per proposal
            whatever the graph's size; ``0`` = the fixed ``incumbent_prior`` alone.
        segment_moves: with ``node_moves``, each placement may also set a short run of
            nodes (2-8 in topological order, from a learned start) to one device at once,
            so changes that pay only together can be sampled
            (:mod:`policies.hsdag.segment_moves`).

    A run's settings (:class:`hsdag_ray.run.config.TrainConfig`) hold one of these as their
    ``hsdag`` section, with ``incumbent_prior`` -1 meaning "the run decides": 2 with
    ``--guide``, else 0 (:func:`hsdag_ray.run.resolve.resolved` writes it out before the
    network is built), and ``prior_device`` set by the run (``--start best_single``).
    """

    hidden_dim: int = 64
    num_gcn_layers: int = 2
    score_layers: int = 2
    placer_layers: int = 2
    pooled_gcn: bool = False
    node_state_update: bool = True
    reuse_sampled_grouping: bool = True
    pooling: Pooling = "mean"
    graph_norm: bool = True
    group_norm: bool = True
    grouping_noise: float = 0.3
    self_loops: bool = False
    node_moves: bool = False
    prior_device: int = dataclasses.field(default=-1, metadata={"setting": False})
    prior_logit: float = 2.0
    sampled_grouping: bool = False
    move_floor: float = 0.0
    incumbent_prior: float = 0.0
    incumbent_flips: float = 0.0
    segment_moves: bool = False

    def __post_init__(self) -> None:
        for name in ("hidden_dim", "score_layers", "placer_layers"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"HSDAGConfig.{name} must be >= 1, got {getattr(self, name)}.")
        if int(self.num_gcn_layers) < 0:
            raise ValueError(f"HSDAGConfig.num_gcn_layers must be >= 0, got {self.num_gcn_layers}.")
        if self.pooling not in POOLINGS:
            raise ValueError(f"HSDAGConfig.pooling must be one of {POOLINGS}, got {self.pooling!r}.")
        if not 0 <= float(self.move_floor) < 2:
            raise ValueError(f"HSDAGConfig.move_floor must be in [0, 2), got {self.move_floor}.")
        if not (float(self.incumbent_prior) >= 0 or float(self.incumbent_prior) == -1):
            raise ValueError(f"HSDAGConfig.incumbent_prior must be -1 (the run decides) or >= 0, "
                             f"got {self.incumbent_prior}.")
        if not float(self.incumbent_flips) >= 0:
            raise ValueError(f"HSDAGConfig.incumbent_flips must be >= 0, got {self.incumbent_flips}.")
        if not float(self.grouping_noise) >= 0:
            raise ValueError(f"HSDAGConfig.grouping_noise must be >= 0, got {self.grouping_noise}.")

    @classmethod
    def from_model_config(cls, model_config: Any) -> "HSDAGConfig":
        """Picks this config's fields out of an RLlib ``model_config`` (dict or dataclass).

        Keys that are not fields (RLlib's own, such as ``max_seq_len``) are ignored.
        """
        if model_config is None:
            return cls()
        if dataclasses.is_dataclass(model_config):
            model_config = dataclasses.asdict(model_config)
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in dict(model_config).items() if k in names})
