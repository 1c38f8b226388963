"""Every placement method of the project, by name: what ``train --method`` runs.

A method is one of three kinds:

``rl``
    a learned policy: its RLlib ``TorchRLModule``, the algorithm that trains
    it (REINFORCE or PPO, and optionally its own learner class), the
    environment it acts in, and the network settings it reads from the run's
    settings;
``search``
    search without learning at the same measurement budget (a function that
    proposes placements and reads their measurements);
``solver``
    an exact or algorithmic method that computes one placement from the
    profile's costs, which is then measured like any other.

Classes and functions are named as ``"package.module:attribute"`` and imported
only when the method runs, so listing the methods imports nothing heavy.
Adding a method is its own module plus one :func:`register` call below.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

__all__ = ["Method", "METHODS", "register", "get", "load"]

KINDS = ("rl", "search", "solver")


@dataclass(frozen=True)
class Method:
    """One placement method.

    Attributes:
        name: the ``--method`` name.
        kind: ``rl``, ``search`` or ``solver``.
        description: one line for ``--help`` and tables.
        module: ``rl``: ``"pkg.mod:Class"`` of its ``TorchRLModule``.
        algo: ``rl``: its default algorithm, ``reinforce`` or ``ppo``.
        learner: ``rl``: ``"pkg.mod:Class"`` of its REINFORCE learner
            (empty: :class:`policies.reinforce.REINFORCETorchLearner`).
        env: ``rl`` and ``search``: ``"pkg.mod:Class"`` of the environment.
        model_config: ``rl``: the ``model_config`` of its RLModule from the
            run's settings (a mapping of :class:`hsdag_ray.config.TrainConfig`'s fields).
        learner_config: ``rl``: extra settings of its REINFORCE algorithm
            config (e.g. which advantages), from the run's settings.
        ppo_config: ``rl``: extra settings of RLlib's ``PPOConfig.training`` when it
            trains with PPO, from the run's settings.
        run: ``search`` / ``solver``: ``"pkg.mod:function"`` that does the work.
        reward: the environment's reward (:data:`envs.placement_env.REWARDS`)
            when the run names none.
        init_soften: ``rl``: the factor a fine-tuning run (``train --init``) spreads
            the loaded policy by when the run names none (1: not at all).
        budget_after_imitation: ``rl``: placements of reinforcement ``python -m
            hsdag_ray.pretrain`` does after ``--imitate-steps`` when the run names no
            ``--budget`` (None: pretrain's ``DEFAULT_BUDGET``, as without imitation).
        incumbent_prior: ``rl``: its policy samples around the incumbent by the run's
            ``--incumbent-prior`` (its environment then carries the incumbent's features);
            the other methods ignore that setting.
        starts: ``search``: it searches from a given placement (the run's start, or with
            ``--exact-start`` the faster of it and the exact solver's placement).
        costs: ``search`` and ``solver``: it reads the run's profile, as a cost graph of
            the run's graph (``costs=``, with ``objective=``), so it needs a profile of
            every device.
        departures: ``rl``: where the implementation departs from the paper, one line
            each saying why (defects of the published method or its reference code).
    """

    name: str
    kind: str
    description: str
    module: str = ""
    algo: str = "reinforce"
    learner: str = ""
    env: str = "envs.placement_env:PlacementEnv"
    model_config: Optional[Callable[[Mapping[str, Any]], dict]] = None
    learner_config: Optional[Callable[[Mapping[str, Any]], dict]] = None
    ppo_config: Optional[Callable[[Mapping[str, Any]], dict]] = None
    run: str = ""
    reward: str = "inverse"
    init_soften: float = 1.0
    budget_after_imitation: Optional[int] = None
    incumbent_prior: bool = False
    starts: bool = False
    costs: bool = False
    departures: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"method {self.name}: kind must be one of {KINDS}")
        if self.kind == "rl" and not self.module:
            raise ValueError(f"method {self.name}: an rl method names its RLModule")
        if self.kind != "rl" and not self.run:
            raise ValueError(f"method {self.name}: a {self.kind} method names its run function")


METHODS: dict[str, Method] = {}


def register(method: Method) -> Method:
    if method.name in METHODS:
        raise ValueError(f"method {method.name!r} is registered twice")
    METHODS[method.name] = method
    return method


def get(name: str) -> Method:
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; choose one of {', '.join(METHODS)}") from None


def load(target: str) -> Any:
    """Import ``"pkg.mod:attribute"``."""
    mod, _, attr = target.partition(":")
    return getattr(importlib.import_module(mod), attr)


# ----------------------------------------------------------------------- methods
def _hsdag_model_config(s: Mapping[str, Any]) -> dict:
    return {"hidden_dim": s["hidden_dim"], "num_gcn_layers": s["gcn_layers"],
            "node_state_update": s["node_state_update"], "max_seq_len": s["episode_len"],
            "grouping_noise": s["grouping_noise"], "self_loops": s["self_loops"],
            "node_moves": s.get("node_moves", False),
            "segment_moves": s.get("segment_moves", False),
            "sampled_grouping": s.get("sampled_grouping", False),
            "move_floor": s.get("move_floor", 0.0), "incumbent_prior": s.get("incumbent_prior", 0.0),
            "incumbent_flips": s.get("incumbent_flips", 0.0),
            "prior_device": s.get("prior_device", -1), "prior_logit": s.get("start_logit", 2.0),
            "graph_norm": s.get("graph_norm", True)}


def _batch_advantages(s: Mapping[str, Any]) -> dict:
    return {"advantages": s["advantages"], "replay_episodes": s.get("replay_episodes", 0),
            "replay": s.get("replay", "elite"), "num_epochs": s.get("num_epochs", 1),
            "stall_patience": s.get("stall_patience", 0), "stall_entropy": s.get("stall_entropy", 0.1),
            "stall_shrink": s.get("stall_shrink", 1.0)}


register(Method(
    name="hsdag", kind="rl",
    description="HSDAG (Duan et al., NeurIPS 2024): GCN embeddings, Graph-Parsing grouping, MLP placer",
    module="policies.hsdag.module:HSDAGRLModule", model_config=_hsdag_model_config,
    learner_config=_batch_advantages, incumbent_prior=True,
    departures=(
        "placements are applied to ops by name, not by get_ops() order (the reference code "
        "placed the wrong ops)",
        "grouping keeps each node's dominant edge and takes connected components, so a "
        "connected graph never collapses into one group (the reference pooling loop did)",
        "REINFORCE subtracts the batch-mean reward (a baseline: the paper gives none, and "
        "1/latency alone never changes sign)",
        "an entropy bonus (0.01) keeps the policy sampling when a whole batch fails to run",
        "GraphNorm on the node embeddings keeps one graph's groups distinct",
        "Gumbel noise (0.3) on the edge scores while sampling, so groupings vary between "
        "placements; greedy placement parses without it",
    )))


def _placeto_model_config(s: Mapping[str, Any]) -> dict:
    # rounds: PlacetoConfig's default (the paper's 8) until the run has a setting for it
    return {"hidden_dim": s["hidden_dim"]}


def _placeto_learner_config(s: Mapping[str, Any]) -> dict:
    # undiscounted returns within an episode, as the paper (a gamma setting would go here)
    return {"gamma": 1.0}


register(Method(
    name="placeto", kind="rl",
    description="Placeto (Addanki et al., NeurIPS 2019): one node per step, DAG message passing, "
                "REINFORCE on runtime improvements",
    module="policies.placeto.module:PlacetoRLModule", learner="policies.placeto.learner:PlacetoTorchLearner",
    env="envs.placeto_env:PlacetoEnv", model_config=_placeto_model_config,
    learner_config=_placeto_learner_config,
    departures=("an entropy bonus keeps the policy sampling when a whole batch fails to run",),
    # pre-trained by imitation only: 500 placements of reinforcement after imitating the
    # training graphs' optima undid the imitation in 2 of 5 pre-training seeds on the real
    # family and gained little otherwise (docs/results/transfer.md)
    budget_after_imitation=0))


def _rnn_model_config(s: Mapping[str, Any]) -> dict:
    return {"hidden_dim": s["hidden_dim"], "grouper": s["rnn_groups"] > 0,
            "num_groups": max(1, s["rnn_groups"])}


register(Method(
    name="rnn", kind="rl",
    description="RNN placer (Mirhoseini et al., ICML 2017): seq2seq over ops in topological order, "
                "bidirectional LSTM encoder, attentional LSTM decoder; --rnn-groups G adds the "
                "learned grouper of the 2018 paper",
    module="policies.rnn.module:RNNPlacerRLModule", learner="policies.rnn.learner:RNNPlacerTorchLearner",
    model_config=_rnn_model_config, reward="neg_sqrt",
    departures=("the loss is -advantage x log-probability with reward -sqrt(runtime), "
                "so faster placements are reinforced (the reference code's sign rewarded "
                "slow ones)",)))


register(Method(
    name="random", kind="search", run="policies.search.local:RandomSearch",
    description="random search: uniform random placements, the best measured wins"))

register(Method(
    name="anneal", kind="search", run="policies.search.local:SimulatedAnnealing", starts=True,
    description="simulated annealing from the run's start over node and block moves"))

register(Method(
    name="refit", kind="search", run="policies.search.refit:ProfileThompson", costs=True,
    description="the exact solver on the run's profile, refitted to every measurement "
                "(Bayesian linear regression) and sampled (Thompson sampling); sequential or "
                "throughput objective"))


def _gdp_model_config(s: Mapping[str, Any]) -> dict:
    # the placer's depth, heads and segment length: GDPConfig's defaults
    return {"hidden_dim": s["hidden_dim"]}


def _gdp_ppo_config(s: Mapping[str, Any]) -> dict:
    # No KL penalty: the KL of a placement sums over every node, so it passes PPO's target
    # (0.01) after any real step and the adaptive coefficient grows until the policy freezes
    # (tiny_cnn, lr 1e-2: no progress in 360 placements). The clipped ratio bounds the steps.
    return {"use_kl_loss": False}


register(Method(
    name="gdp", kind="rl", algo="ppo",
    description="GDP (Zhou et al., 2019): GraphSAGE, segment-recurrent attention placer "
                "conditioned on the graph (superposition), all nodes in one shot, PPO",
    module="policies.gdp.module:GDPRLModule", model_config=_gdp_model_config,
    ppo_config=_gdp_ppo_config,
    departures=("no PPO KL penalty: the KL of a placement sums over every node, so the "
                "adaptive coefficient grows until the policy freezes; the clipped ratio "
                "bounds the steps",),
    # pre-trained, it samples nothing but its greedy placement; spread, it reached 1.05x of
    # the optimum on every held-out graph measured (docs/results/transfer.md)
    init_soften=0.2))


register(Method(
    name="exact", kind="solver", run="policies.solvers.methods:exact_placement", costs=True,
    description="the exact optimum of the run's profile (s-t minimum cut for two devices, "
                "else MILP; Tarnawski et al., NeurIPS 2020), measured"))

register(Method(
    name="heft", kind="solver", run="policies.solvers.methods:heft_placement", costs=True,
    description="HEFT list scheduling (Topcuoglu et al., 2002) on the run's profile, measured"))

register(Method(
    name="m-topo", kind="solver", run="policies.solvers.methods:m_topo_placement", costs=True,
    description="Baechi m-TOPO (Jeon et al., SoCC 2020): topological order filling the "
                "devices in turn within memory, on the run's profile, measured"))

register(Method(
    name="m-etf", kind="solver", run="policies.solvers.methods:m_etf_placement", costs=True,
    description="Baechi m-ETF (Jeon et al., SoCC 2020): earliest-start list scheduling "
                "within memory, on the run's profile, measured"))

register(Method(
    name="m-sct", kind="solver", run="policies.solvers.methods:m_sct_placement", costs=True,
    description="Baechi m-SCT (Jeon et al., SoCC 2020): m-ETF keeping each favourite child "
                "with its parent, on the run's profile, measured",
    departures=("favourite children by a greedy rule (edges by decreasing transfer time, at "
                "most one favourite child and one favourite parent per node) instead of the "
                "paper's LP relaxation: no LP solve in the planning time, and the same pairs "
                "wherever one tensor clearly dominates each node's outputs",)))
