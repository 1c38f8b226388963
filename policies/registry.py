"""Every placement method of the project, by name: what ``train --method`` runs.

A method takes one of three approaches (:attr:`Method.approach`):

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

import dataclasses
import importlib
from dataclasses import dataclass
from typing import Any, Callable, Optional

__all__ = ["Method", "METHODS", "register", "get", "load", "reinforce_config"]

APPROACHES = ("rl", "search", "solver")


@dataclass(frozen=True)
class Method:
    """One placement method.

    Attributes:
        name: the ``--method`` name.
        approach: how it finds a placement: ``rl`` (learns a policy), ``search`` or ``solver``.
        description: one line for ``--help`` and tables.
        module: ``rl``: ``"pkg.mod:Class"`` of its ``TorchRLModule``.
        algo: ``rl``: its default algorithm, ``reinforce`` or ``ppo``.
        learner: ``rl``: ``"pkg.mod:Class"`` of its REINFORCE learner
            (empty: :class:`policies.reinforce.REINFORCETorchLearner`).
        baseline: ``rl``: ``"pkg.mod:Class"`` of its own advantages, a callable
            ``(rewards, mask) -> advantages`` without Ray that its learner uses and an
            in-process run uses too (empty: the batch advantages of the run's
            ``advantages`` setting).
        env: ``rl`` and ``search``: ``"pkg.mod:Class"`` of the environment.
        model_config: ``rl``: the ``model_config`` of its RLModule from the run's
            settings (a :class:`hsdag_ray.run.config.TrainConfig` as
            :func:`hsdag_ray.run.resolve.resolved` writes it out: typically its own section).
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
        objectives: the objectives it handles (empty: every one).
        departures: ``rl``: where the implementation departs from the paper, one line
            each saying why (defects of the published method or its reference code).
    """

    name: str
    approach: str
    description: str
    module: str = ""
    algo: str = "reinforce"
    learner: str = ""
    baseline: str = ""
    env: str = "envs.placement_env:PlacementEnv"
    model_config: Optional[Callable[[Any], dict]] = None
    learner_config: Optional[Callable[[Any], dict]] = None
    ppo_config: Optional[Callable[[Any], dict]] = None
    run: str = ""
    reward: str = "inverse"
    init_soften: float = 1.0
    budget_after_imitation: Optional[int] = None
    incumbent_prior: bool = False
    starts: bool = False
    costs: bool = False
    objectives: tuple[str, ...] = ()
    departures: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.approach not in APPROACHES:
            raise ValueError(f"method {self.name}: approach must be one of {APPROACHES}")
        if self.approach == "rl" and not self.module:
            raise ValueError(f"method {self.name}: an rl method names its RLModule")
        if self.approach != "rl" and not self.run:
            raise ValueError(f"method {self.name}: a {self.approach} method names its run function")


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


def reinforce_config(method: Method, cfg: Any) -> tuple[Any, dict]:
    """REINFORCE's settings of a run of ``method`` (a
    :class:`policies.reinforce_config.ReinforceConfig`: the run's ``lr``, ``entropy_coeff``,
    ``episode_len`` and ``episodes_per_iteration``, and those of its fields the method's
    ``learner_config`` passes on; the others keep their defaults) and the rest of
    ``learner_config`` (settings of RLlib's algorithm config, e.g. ``gamma``)."""
    from policies.reinforce_config import ReinforceConfig

    names = {f.name for f in dataclasses.fields(ReinforceConfig)}
    extra = method.learner_config(cfg) if method.learner_config else {}
    learning = cfg.learning
    learn = ReinforceConfig(lr=float(learning.lr), entropy_coeff=float(learning.entropy_coeff),
                            episode_len=int(learning.episode_len),
                            episodes_per_iteration=int(learning.episodes_per_iteration),
                            **{k: v for k, v in extra.items() if k in names})
    return learn, {k: v for k, v in extra.items() if k not in names}


# ----------------------------------------------------------------------- methods
def _hsdag_model_config(cfg) -> dict:
    return {**dataclasses.asdict(cfg.hsdag), "max_seq_len": cfg.learning.episode_len}


def _batch_advantages(cfg) -> dict:
    return {name: getattr(cfg.learning, name) for name in (
        "advantages", "replay_episodes", "replay", "num_epochs", "stall_patience",
        "stall_entropy", "stall_shrink")}


register(Method(
    name="hsdag", approach="rl",
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
        "GraphNorm on the node embeddings keeps one graph's groups distinct (a graph of one "
        "node keeps its features: normalising a node against itself gave NaN weights)",
        "Gumbel noise (0.3) on the edge scores while sampling, so groupings vary between "
        "placements; greedy placement parses without it",
    )))


def _placeto_model_config(cfg) -> dict:
    return dataclasses.asdict(cfg.placeto)


def _placeto_learner_config(cfg) -> dict:
    # undiscounted returns within an episode, as the paper (a gamma setting would go here)
    return {"gamma": 1.0}


register(Method(
    name="placeto", approach="rl",
    description="Placeto (Addanki et al., NeurIPS 2019): one node per step, DAG message passing, "
                "REINFORCE on runtime improvements",
    module="policies.placeto.module:PlacetoRLModule", learner="policies.placeto.learner:PlacetoTorchLearner",
    env="envs.placeto_env:PlacetoEnv", model_config=_placeto_model_config,
    learner_config=_placeto_learner_config,
    departures=("an entropy bonus keeps the policy sampling when a whole batch fails to run",),
    # pre-trained by imitation only: reinforcement after imitating the training graphs'
    # optima could undo the imitation (docs/results/transfer.md)
    budget_after_imitation=0))


def _rnn_model_config(cfg) -> dict:
    return dataclasses.asdict(cfg.rnn)


register(Method(
    name="rnn", approach="rl",
    description="RNN placer (Mirhoseini et al., ICML 2017): seq2seq over ops in topological order, "
                "bidirectional LSTM encoder, attentional LSTM decoder; --grouper --num-groups G "
                "adds the learned grouper of the 2018 paper",
    module="policies.rnn.module:RNNPlacerRLModule", learner="policies.rnn.learner:RNNPlacerTorchLearner",
    baseline="policies.rnn.baseline:EMAAdvantages",
    model_config=_rnn_model_config, reward="neg_sqrt",
    departures=("the loss is -advantage x log-probability with reward -sqrt(runtime), "
                "so faster placements are reinforced (the reference code's sign rewarded "
                "slow ones)",)))


register(Method(
    name="random", approach="search", run="policies.search.local:RandomSearch",
    description="random search: uniform random placements, the best measured wins"))

register(Method(
    name="anneal", approach="search", run="policies.search.local:SimulatedAnnealing", starts=True,
    description="simulated annealing from the run's start over node and block moves"))

register(Method(
    name="refit", approach="search", run="policies.search.refit:ProfileThompson", costs=True,
    objectives=("sequential", "throughput"),  # envs.latency_model.MODELED_OBJECTIVES
    description="the exact solver on the run's profile, refitted to every measurement "
                "(Bayesian linear regression) and sampled (Thompson sampling); sequential or "
                "throughput objective"))


def _gdp_model_config(cfg) -> dict:
    return dataclasses.asdict(cfg.gdp)


def _gdp_ppo_config(cfg) -> dict:
    # No KL penalty: the KL of a placement sums over every node, so it passes PPO's target
    # (0.01) after any real step and the adaptive coefficient grows until the policy freezes.
    # The clipped ratio bounds the steps.
    return {"use_kl_loss": False}


register(Method(
    name="gdp", approach="rl", algo="ppo",
    description="GDP (Zhou et al., 2019): GraphSAGE, segment-recurrent attention placer "
                "conditioned on the graph (superposition), all nodes in one shot, PPO",
    module="policies.gdp.module:GDPRLModule", model_config=_gdp_model_config,
    ppo_config=_gdp_ppo_config,
    departures=("no PPO KL penalty: the KL of a placement sums over every node, so the "
                "adaptive coefficient grows until the policy freezes; the clipped ratio "
                "bounds the steps",),
    # pre-trained, it samples nothing but its greedy placement; what spreading it does:
    # docs/results/transfer.md, "GDP on the real family: spreading the pre-trained policy"
    init_soften=0.2))


register(Method(
    name="exact", approach="solver", run="policies.solvers.methods:exact_placement", costs=True,
    description="the exact optimum of the run's profile (s-t minimum cut for two devices, "
                "else MILP; for the latency objective the latency IP; Tarnawski et al., "
                "NeurIPS 2020; for the parallel objective CP-SAT, its best schedule within "
                "the time limit, whose placement single moves and then annealing under the "
                "simulator improve in the time left), measured"))

register(Method(
    name="heft", approach="solver", run="policies.solvers.methods:heft_placement", costs=True,
    description="HEFT list scheduling (Topcuoglu et al., 2002) on the run's profile, measured"))

register(Method(
    name="m-topo", approach="solver", run="policies.solvers.methods:m_topo_placement", costs=True,
    description="Baechi m-TOPO (Jeon et al., SoCC 2020): topological order filling the "
                "devices in turn within memory, on the run's profile, measured"))

register(Method(
    name="m-etf", approach="solver", run="policies.solvers.methods:m_etf_placement", costs=True,
    description="Baechi m-ETF (Jeon et al., SoCC 2020): earliest-start list scheduling "
                "within memory, on the run's profile, measured"))

register(Method(
    name="m-sct", approach="solver", run="policies.solvers.methods:m_sct_placement", costs=True,
    description="Baechi m-SCT (Jeon et al., SoCC 2020): m-ETF keeping each favourite child "
                "with its parent, on the run's profile, measured",
    departures=("favourite children by a greedy rule (edges by decreasing transfer time, at "
                "most one favourite child and one favourite parent per node) instead of the "
                "paper's LP relaxation: no LP solve in the planning time, and the same pairs "
                "wherever one tensor clearly dominates each node's outputs",)))
