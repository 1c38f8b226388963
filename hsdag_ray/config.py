"""The settings of a training run.

:class:`TrainConfig` is the one typed config of ``python -m hsdag_ray.train``,
checked by :meth:`TrainConfig.validate`; :mod:`hsdag_ray.arguments` makes its
command line (a flag of every field) and reads YAML files and resumed runs into it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from envs.env_config import EnvConfig
from hsdag_ray.cli import UsageError, read_yaml_mapping
from policies.hsdag.config import HSDAGConfig

__all__ = ["TrainConfig", "SECTIONS", "MEASURE_RESOURCE", "backend_choices", "ALGOS"]


#: the custom Ray resource a measuring machine advertises once (one measurement at a time)
MEASURE_RESOURCE = "measure_slot"

def backend_choices() -> tuple[str, ...]:
    """``--backend``'s choices: ``default`` and every registered backend."""
    from envs.backends import BACKENDS

    return ("default",) + tuple(BACKENDS)

ALGOS = ("reinforce", "ppo")


#: the settings by section (``train --help`` shows ``run``; ``train --method M --help`` adds
#: the others that apply: ``run details``, ``learning`` and ``guide``, and the method's own,
#: the section named after it, if any)
SECTIONS: dict[str, tuple[str, ...]] = {
    "run": ("model", "method", "guide", "backend", "devices", "profile", "objective", "budget",
            "seed", "init", "wandb", "out", "name", "address", "env_runners"),
    "run details": ("input_shape", "sim_profile", "coarsen", "budget_unit", "wandb_project",
                    "checkpoint_every", "repeats", "threads", "timeout", "remeasure_rounds",
                    "solver_time_limit", "torch_threads", "sim_delay_s", "failure_factor",
                    "memory_penalty", "zero_shot_samples"),
    "learning": ("algo", "reward", "lr", "entropy_coeff", "advantages", "episode_len",
                 "episodes_per_iteration", "num_epochs", "replay_episodes", "replay",
                 "stall_patience", "stall_entropy", "stall_shrink", "hidden_dim", "init_soften",
                 "no_fractal", "no_shape", "no_op_type", "no_degree", "no_cost",
                 "relative_features", "position", "incumbent", "start", "start_logit"),
    "guide": ("exact_start", "etf_start", "neighbour_every", "neighbour_order", "refit_every", "screen",
              "incumbent_share"),
    "hsdag": ("gcn_layers", "node_state_update", "grouping_noise", "self_loops", "node_moves",
              "segment_moves", "move_floor", "sampled_grouping", "graph_norm", "incumbent_prior",
              "incumbent_flips"),
    "rnn": ("rnn_groups",),
}


@dataclass
class TrainConfig:
    """One training run. The command line and a YAML file (``--config``) fill it.

    Attributes:
        model: zoo name (resnet50, inception_v3, bert_base, tiny_cnn), tv:NAME (a
            torchvision architecture), hf:TYPE (a Hugging Face model type), gen:KIND:...
            (a generated graph), all with random weights, or a .xml/.onnx file.
        input_shape: static input shape(s) of a dynamic file model, e.g. 1,3,224,224 or
            input_ids:1,128;attention_mask:1,128.
        method: placement method, one of those ``--help`` lists at its end; a learned
            method runs as its paper specifies unless ``guide`` is on.
        guide: the project's search aids, for every method alike (off: each method as
            published). The exact solver's placement on the run's profile is measured as
            the run's first, HSDAG samples around the run's best (its incumbent prior, the
            only policy that has one), and one untried neighbour of the run's best is
            measured per 10 placements proposed, the refitted profile's optimum first at
            each new best (policies/search/neighbour_guide.py). Placements the guide proposes
            are counted in the budget and marked in the summary.
        algo: ``reinforce`` (the paper's) or ``ppo``; empty = the method's own.
        backend: ``default`` (real OpenVINO devices when the machine has two, else the
            simulator) or a registered backend: ``simulator``, ``auto``, ``hetero``,
            ``pipeline`` (OpenVINO) or ``torch`` (PyTorch devices, NVIDIA GPUs among them).
        devices: device names; empty = chosen with the backend.
        profile: profile JSON: the simulator's costs (empty = record the local
            CPU and model an accelerator); with a real backend, the costs the
            exact solver's placement is computed on before it is measured.
        sim_profile: with --backend simulator, a profile JSON the simulator measures with,
            playing the real machine, while --profile stays what the run knows (node
            features, the memory repair, the start, the exact solver's placement); e.g. a
            profile whose op times are off, to see how a method does when its profile is
            wrong, as a recorded one is on a real machine (empty = the simulator measures
            with --profile).
        objective: what is minimised: sequential (the latency of one inference),
            throughput (a pipeline's time per sample: the simulator and the torch backend
            measure it) or parallel (independent stages at once: the simulator).
        coarsen: graph coarsening before learning: none, colocation, openvino.
        budget: placements the policy proposes, each measured or (when proposed
            before) read from the cache (the paper: about 500); training stops
            after the iteration that reaches it, so it rounds up to whole
            iterations (episode_len x episodes_per_iteration placements each).
        budget_unit: what the budget counts: placements (proposed, the default) or
            measurements (new placements measured; a proposal the cache answers costs
            nothing), then at most 5x the budget in placements proposed (and with
            --screen 10x in placements screened).
        episode_len: placements per episode (HSDAG's paper: 20).
        episodes_per_iteration: episodes per policy update.
        env_runners: measuring actors (0 = sample in the driver).
        lr: Adam learning rate (HSDAG's paper: 1e-3).
        entropy_coeff: entropy bonus weight (keeps the policy moving when a
            whole batch fails).
        advantages: how REINFORCE weighs each placement: centered (the reward minus the
            batch mean, a plain REINFORCE baseline), normalized (also over the batch's
            standard deviation), rank (centred ranks: fitness shaping) or elite (the
            cross-entropy method's top quarter).
        replay_episodes: earlier episodes every update also trains on, ranked with the
            new ones (measured placements re-used at no measurement cost; 0 = off).
        replay: which earlier episodes: elite (those with the best placements) or recent.
        num_epochs: optimiser passes over each update's batch (1: REINFORCE's one step).
        stall_patience: updates without a new best placement after which the entropy
            bonus weight becomes stall_entropy, until a new best is found (0 = off;
            see policies/reinforce.py).
        stall_entropy: the entropy bonus weight while stalled.
        stall_shrink: below 1, a stalled run also scales HSDAG's placer and move
            head output layers by this factor (the placement distribution spreads
            again, keeping its preferences), then counts stalled updates afresh.
        reward: inverse (1/latency, HSDAG's), speedup, neg_log, neg_sqrt (-sqrt(latency), the
            RNN placer's); empty = the method's own.
        hidden_dim / gcn_layers / node_state_update: HSDAG network settings.
        rnn_groups: RNN placer: 0 places every op; G > 0 places G groups of a learned
            feed-forward grouper (the hierarchical placer of Mirhoseini et al., 2018).
        grouping_noise: Gumbel noise on the edge scores when sampling groupings
            (0 = the deterministic parsing of inference).
        node_moves: HSDAG: after the groups' devices are drawn, each node may move off
            its group's device with a learned probability, so placements with a node
            alone can be sampled (off: the paper's grouped placement; policies/hsdag/move_distribution.py).
        segment_moves: with node moves, each placement may also set a short run of
            nodes (2-8 in topological order, from a learned start) to one device at
            once, so changes that pay only together can be sampled (policies/hsdag/segment_moves.py).
        move_floor: with node moves, each node of an n-node graph moves with probability
            at least move_floor / n, so a policy that has settled still proposes its
            placement with about move_floor nodes changed, the neighbours a local search
            would try, instead of the same placement again (0 = off).
        sampled_grouping: every node draws its dominant edge (softmax of its edges'
            scores at temperature grouping_noise) and the draw's log-probability joins
            the placement's, so REINFORCE trains the edge scorer on the reward.
        graph_norm: HSDAG normalises its node embeddings per graph (GraphNorm): it keeps
            one graph's groups distinct; off, a policy over many graphs keeps what tells
            one graph from another (HSDAG only).
        incumbent_prior: HSDAG samples around the run's best placement so far (or the
            fastest single device until a measured placement beats it): each group leans
            toward the incumbent's device by this logit, and a node the incumbent places
            apart from its group moves back to it with about the same odds (0 = off, the
            paper's sampling; -1 = 2 with guide, else 0; HSDAG only).
        incumbent_flips: with incumbent_prior, each group leans toward the incumbent by
            at least log((D-1) G / F) on a graph of G groups, so an untrained policy
            changes about F groups per proposal on a graph of any size (with the fixed
            lean of 2, about one group in eight: 7 of 60); 0 = incumbent_prior alone.
        exact_start: on: measure the exact solver's placement on the run's profile (for
            the parallel objective HEFT's) as the run's first placement, counted in the
            budget; off: not; auto: with guide.
        etf_start: a critical-path warm start: measure Baechi's m-ETF placement (earliest-
            start list scheduling within memory) on the run's profile as the run's first
            placement, counted in the budget, for every method that searches (after the
            exact start's, when both are on); needs a profile of every device.
        incumbent_share: the share of episodes that see the incumbent; the others
            are sampled without it (with incumbent_prior: from the policy's own
            logits), so a run settled around its incumbent still wanders (1 = every
            episode).
        incumbent: the run's best placement so far (or the fastest single device,
            until a measured placement beats it) becomes node features (one-hot
            device, refreshed at every episode's start), so the policy can learn to
            place relative to it (see envs/placement_env.py).
        start: where sampling starts: uniform (every device equally likely, the paper)
            or best_single (the fastest single device's logit starts start_logit above
            the others' in every group).
        start_logit: that head start (a probability of about 0.88 with two devices at 2).
        self_loops: a node may choose its own loop in graph parsing and stay a group of
            its own.
        no_fractal / no_shape / no_cost / no_op_type / no_degree: feature
            ablations (leave that feature group out).
        relative_features: add scale-free costs (each node's time over the graph's mean
            time per device, which device is faster for it, its and the whole graph's
            memory as fractions of each device's capacity) so one policy reads graphs of
            very different sizes alike; python -m hsdag_ray.pretrain turns it on (see
            hsdag_core/features.py).
        position: node position feature: id, sin or none.
        seed: random seed.
        wandb: offline, online or disabled.
        wandb_project: W&B project name.
        out: folder of run folders.
        name: run folder name (default: model-method-time).
        checkpoint_every: iterations between checkpoints.
        address: Ray address to join (``auto`` for a running cluster); empty = local Ray.
        repeats / threads / timeout: timing of real measurements.
        failure_factor: a failed placement counts as this many times the reference latency.
        memory_penalty: repair (the default: a placement the profile says overflows is
            not measured; its repair, the cheapest set of nodes moved off the full device
            to one with room, is measured and rewarded instead, see hsdag_core/fit.py;
            without a profile of every device, graded), graded (a placement over a device's memory counts as
            failure_factor x (1 + the fraction it is over) times the reference, so a batch
            that all overflows still says which placements are closer to fitting), or flat.
        remeasure_rounds: with a real backend, the run's best few placements and every
            baseline are timed again this many interleaved rounds at the end, and every
            reported figure is a re-measured one (see hsdag_ray/summary.py).
        solver_time_limit: seconds the exact solver may take for the optimum; an optimum
            not proven within it is reported as such (optimum_proven, optimum_gap).
        sim_delay_s: with the simulator, seconds every measurement takes, as on a real
            device (0 = instant); above 0 the run measures on measuring machines as a
            real one does (scaling benchmarks, multi-machine tests).
        init: a pre-trained policy to fine-tune (the folder or pretrained.pt python -m
            hsdag_ray.pretrain wrote); with --budget 0 it places zero-shot. Its weights are
            loaded into the RLModule before training, and the run's first measured
            placement (counted in the budget) is the policy's greedy one, its second the
            fastest single device (fitted) unless that is the same, so the run never ends
            worse than either. With a profile of the devices, the greedy and zero-shot
            placements are repaired before they are measured when they overflow a
            device's memory (hsdag_core/fit.py).
        init_soften: below 1, a run with --init spreads the pre-trained policy's
            distribution once after loading it (the placer's output layers scaled by this
            factor, preferences kept in order), so a settled policy samples more than its
            greedy placement (1 = off; 0 = the method's own: 0.2 for GDP, off otherwise).
        screen: 0 (off), or do not measure a new placement the run's latency model (the
            profile refitted to the run's measurements, as --method refit fits it) says is
            slower than the run's best by more than this many standard deviations of the
            prediction; such a placement is rewarded as predicted and counted as screened,
            not measured (needs a profile of every device and the sequential objective;
            not with --method refit, which proposes the model's own optimum).
        refit_every: 0 (off), or for every this many placements proposed in the run
            (measured or answered from the cache), measure a proposal of --method refit
            (the exact solver on the profile refitted to the run's measurements) as the
            run's own, counted in the budget (policies/search/refit_guide.py; needs a profile of
            every device and the sequential objective).
        neighbour_every: 0 (off), or for every this many placements proposed in the run,
            measure an untried neighbour of the run's best (one node on another device; once
            all are measured, both ends of an edge) as the run's own, counted in the budget
            (policies/search/neighbour_guide.py); -1: 10 with guide unless refit_every is set, else 0.
        neighbour_order: profile (the default: with a profile of every device, at each
            new best first the exact optimum of the profile refitted to the run's
            measurements, then the neighbours it estimates fastest first, those it says do
            not fit left out and a single change that does not fit replaced by its swaps;
            in a random order without one) or random (single changes in a random order).
        zero_shot_samples: with --budget 0, placements measured: the policy's greedy
            one, plus this many minus one sampled from it (a sample that overflows is
            drawn again, up to 10 draws per sample and 10 misses in a row, then repaired).
        torch_threads: threads of every torch process (driver, learner, EnvRunners);
            more than one on a small machine shared with Ray and OpenVINO makes
            each update many times slower (threads spin waiting for each other).
    """

    model: str = "resnet50"
    input_shape: str = ""
    method: str = "hsdag"
    guide: bool = False
    algo: str = ""
    backend: str = "default"
    devices: list[str] = field(default_factory=list)
    profile: str = ""
    sim_profile: str = ""
    objective: str = EnvConfig.objective
    coarsen: str = EnvConfig.coarsen
    budget: int = 500
    budget_unit: str = "placements"
    episode_len: int = EnvConfig.episode_len
    episodes_per_iteration: int = 1
    env_runners: int = 1
    lr: float = 1e-3
    entropy_coeff: float = 0.01
    advantages: str = "centered"
    replay_episodes: int = 0
    replay: str = "elite"
    num_epochs: int = 1
    stall_patience: int = 0
    stall_entropy: float = 0.1
    stall_shrink: float = 1.0
    reward: str = ""
    hidden_dim: int = HSDAGConfig.hidden_dim
    gcn_layers: int = HSDAGConfig.num_gcn_layers
    node_state_update: bool = HSDAGConfig.node_state_update
    grouping_noise: float = HSDAGConfig.grouping_noise
    rnn_groups: int = 0
    self_loops: bool = HSDAGConfig.self_loops
    node_moves: bool = HSDAGConfig.node_moves
    segment_moves: bool = False
    move_floor: float = HSDAGConfig.move_floor
    incumbent_prior: float = -1.0
    incumbent_flips: float = HSDAGConfig.incumbent_flips
    incumbent_share: float = EnvConfig.incumbent_share
    exact_start: str = "auto"
    etf_start: bool = False
    sampled_grouping: bool = HSDAGConfig.sampled_grouping
    graph_norm: bool = HSDAGConfig.graph_norm
    incumbent: bool = EnvConfig.incumbent
    start: str = "uniform"
    start_logit: float = HSDAGConfig.prior_logit
    no_fractal: bool = False
    no_shape: bool = False
    no_op_type: bool = False
    no_degree: bool = False
    no_cost: bool = False
    relative_features: bool = False
    position: str = "id"
    seed: int = 0
    wandb: str = "offline"
    wandb_project: str = "hsdag_ray"
    out: str = "runs"
    name: str = ""
    checkpoint_every: int = 5
    address: str = ""
    repeats: int = 5
    threads: int = 1
    timeout: float = 120.0
    failure_factor: float = EnvConfig.failure_factor
    memory_penalty: str = EnvConfig.memory_penalty
    remeasure_rounds: int = 5
    solver_time_limit: float = 120.0
    torch_threads: int = 1
    sim_delay_s: float = EnvConfig.sim_delay_s
    init: str = ""
    init_soften: float = 0.0
    zero_shot_samples: int = 1
    screen: float = EnvConfig.screen
    refit_every: int = 0
    neighbour_every: int = -1
    neighbour_order: str = "profile"

    def validate(self) -> None:
        from envs.backends import BACKENDS, objective_error
        from envs.env_config import MEMORY_PENALTIES, REWARDS
        from envs.simulator import OBJECTIVES
        from hsdag_core.coarsening import COARSENINGS
        from policies.registry import METHODS
        from policies.advantages import ADVANTAGES

        unmeasured = objective_error(self.backend, self.objective) if self.backend in BACKENDS else ""
        checks = [
            (self.method in METHODS,
             f"unknown method {self.method!r}; choose one of {', '.join(METHODS)}"),
            (self.algo in ALGOS + ("",),
             f"unknown algo {self.algo!r}; choose {' or '.join(ALGOS)}"),
            (self.backend in backend_choices(),
             f"unknown backend {self.backend!r}; choose one of {', '.join(backend_choices())}"),
            (self.objective in OBJECTIVES,
             f"unknown objective {self.objective!r}; choose one of {', '.join(OBJECTIVES)}"),
            (not unmeasured, unmeasured),
            (self.coarsen in COARSENINGS,
             f"unknown coarsening {self.coarsen!r}; choose one of {', '.join(COARSENINGS)}"),
            (self.advantages in ADVANTAGES,
             f"unknown advantages {self.advantages!r}; choose one of {', '.join(ADVANTAGES)}"),
            (self.entropy_coeff >= 0 and self.grouping_noise >= 0,
             "entropy_coeff and grouping_noise must be 0 or more"),
            (0 <= self.move_floor < 2, "move_floor must be at least 0 and below 2"),
            (self.incumbent_prior >= 0 or self.incumbent_prior == -1,
             "incumbent_prior must be -1 (with --guide), 0 (off) or more"),
            (self.incumbent_flips >= 0, "incumbent_flips must be 0 (off) or more"),
            (self.stall_patience >= 0 and self.stall_entropy >= 0,
             "stall_patience and stall_entropy must be 0 or more"),
            (0 < self.stall_shrink <= 1, "stall_shrink must be above 0 and at most 1"),
            (self.replay_episodes >= 0 and self.num_epochs >= 1,
             "replay_episodes must be 0 or more and num_epochs at least 1"),
            (self.replay in ("elite", "recent"), "replay must be elite or recent"),
            (self.start in ("uniform", "best_single"), "start must be uniform or best_single"),
            (self.reward in REWARDS + ("",), f"unknown reward {self.reward!r}; choose one of {', '.join(REWARDS)}"),
            (self.memory_penalty in MEMORY_PENALTIES,
             "memory_penalty must be graded, flat or repair"),
            (self.position in ("id", "sin", "none"), "position must be id, sin or none"),
            (self.wandb in ("offline", "online", "disabled"), "wandb must be offline, online or disabled"),
            (self.budget >= 1 or (self.budget == 0 and bool(self.init)),
             "budget must be at least 1 placement (0 places zero-shot with --init CHECKPOINT)"),
            (0 <= self.init_soften <= 1,
             "init_soften must be at most 1 (0: the method's own, 1: off)"),
            (self.init_soften in (0, 1) or bool(self.init),
             "init_soften spreads a pre-trained policy: pass --init CHECKPOINT with it"),
            (self.budget_unit in ("placements", "measurements"),
             "budget_unit must be placements or measurements"),
            (self.zero_shot_samples >= 1, "zero_shot_samples must be at least 1"),
            (self.screen >= 0, "screen must be 0 (off) or a number of standard deviations"),
            (self.refit_every == 0 or self.refit_every >= 2,
             "refit_every must be 0 (off) or at least 2 placements per refit proposal"),
            (self.neighbour_every in (-1, 0) or self.neighbour_every >= 2,
             "neighbour_every must be -1 (auto), 0 (off) or at least 2 placements per neighbour"),
            (self.neighbour_order in ("profile", "random"),
             f"unknown neighbour_order {self.neighbour_order!r}; choose profile or random"),
            (self.episode_len >= 1 and self.episodes_per_iteration >= 1,
             "episode_len and episodes_per_iteration must be at least 1"),
            (self.env_runners >= 0, "env_runners must be 0 or more"),
            (self.rnn_groups >= 0, "rnn_groups must be 0 (no grouper) or a number of groups"),
            (self.lr > 0, "lr must be positive"),
            (self.checkpoint_every >= 1, "checkpoint_every must be at least 1"),
            (self.torch_threads >= 1, "torch_threads must be at least 1"),
            (self.sim_delay_s >= 0, "sim_delay_s must be 0 or more"),
            (0 < self.incumbent_share <= 1, "incumbent_share must be above 0 and at most 1"),
            (self.exact_start in ("auto", "on", "off"), "exact_start must be auto, on or off"),
            (self.remeasure_rounds >= 1 and self.solver_time_limit > 0,
             "remeasure_rounds must be at least 1 and solver_time_limit positive"),
            (self.repeats >= 1 and self.threads >= 0 and self.timeout > 0,
             "repeats must be >= 1, threads >= 0 and timeout > 0"),
        ]
        for ok, msg in checks:
            if not ok:
                raise UsageError(msg)
        if self.init and not Path(self.init).exists():
            raise UsageError(f"pre-trained checkpoint {self.init} does not exist; pass the folder "
                             "python -m hsdag_ray.pretrain printed")
        for what, path in (("profile", self.profile), ("sim-profile", self.sim_profile)):
            if path and not Path(path).is_file():
                raise UsageError(f"{what} file {path} does not exist; record one with "
                                 "python -m hsdag_ray.profile")
        if self.sim_profile and not (self.backend in BACKENDS and BACKENDS[self.backend].simulated):
            raise UsageError("--sim-profile is what the simulator measures with; add "
                             "--backend simulator (a real backend measures the machine itself)")

    def profile_measured(self, backend: str) -> bool:
        """Whether a run on ``backend`` (resolved) measures its own profile: a simulated
        backend without ``sim_profile``; then its exact solver's placement is the optimum."""
        from envs.backends import BACKENDS

        kind = BACKENDS.get(backend)  # a measuring backend's own name (openvino-auto) is no kind
        return kind is not None and kind.simulated and not self.sim_profile

    def starts_exact(self, backend: str) -> bool:
        """Whether ``exact_start`` is on for a run on ``backend`` (auto: with ``guide``)."""
        if self.exact_start == "auto":
            return self.guide
        return self.exact_start == "on"

    def features(self):
        from hsdag_core.features import FeatureConfig

        return FeatureConfig(op_type=not self.no_op_type, shape=not self.no_shape,
                             degree=not self.no_degree, fractal=not self.no_fractal,
                             position=self.position, cost=not self.no_cost,
                             relative=self.relative_features)

    @classmethod
    def yaml_settings(cls, path: str) -> dict[str, Any]:
        """The settings a YAML file (``--config``) names, checked to be fields of this class.
        The file lists them flat or nested by section (:data:`SECTIONS`: ``run:``,
        ``run details:``, ``learning:``, ``guide:``, ``hsdag:``, ``rnn:``), e.g.::

            run: {model: resnet50, method: hsdag, budget: 200}
            hsdag: {grouping_noise: 0.5}
        """
        data = read_yaml_mapping(path, "config file")
        flat: dict[str, Any] = {}
        for key, value in data.items():
            if key in SECTIONS and isinstance(value, dict):
                wrong = sorted(set(value) - set(SECTIONS[key]))
                if wrong:
                    raise UsageError(f"{wrong[0]!r} in section {key!r} of {path} is not a {key} "
                                     f"setting; its settings are {', '.join(SECTIONS[key])}")
                flat.update(value)
            else:
                flat[key] = value
        data = flat
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise UsageError(f"unknown setting {unknown[0]!r} in {path}; settings are the "
                             "long options of --help without dashes")
        return data
