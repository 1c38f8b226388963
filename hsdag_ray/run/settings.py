"""The sections of a training run's settings that belong to no library class.

:class:`hsdag_ray.run.config.TrainConfig` nests these beside the library's own settings
classes (:class:`envs.env_config.EnvConfig`, :class:`envs.base.TimingConfig`,
:class:`hsdag_core.features.FeatureConfig` and each learned method's network config). Each field's help is the string right under
it: ``--help``, the flags and the YAML keys are built from the fields
(:mod:`hsdag_ray.flags`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from envs.env_config import Reward
from policies.reinforce_config import ReinforceConfig

__all__ = ["RunSettings", "LearningSettings", "GuideSettings", "ALGOS"]

Algo = Literal["reinforce", "ppo"]
#: how a learned method updates its policy (``--algo``)
ALGOS: tuple[str, ...] = get_args(Algo)


def _methods() -> tuple[str, ...]:
    from policies.registry import METHODS

    return tuple(METHODS)


@dataclass(frozen=True)
class RunSettings:
    """What is placed, by which method, for how long, and where the run goes."""

    model: str = "resnet50"
    """zoo name (resnet50, inception_v3, bert_base, tiny_cnn), tv:NAME (a torchvision
    architecture), hf:TYPE (a Hugging Face model type), gen:KIND:... (a generated graph),
    all with random weights, or a .xml/.onnx file."""
    input_shape: str = ""
    """static input shape(s) of a dynamic file model, e.g. 1,3,224,224 or
    input_ids:1,128;attention_mask:1,128."""
    method: str = field(default="hsdag", metadata={"choices": _methods})
    """placement method, one of those ``--help`` lists at its end; a learned method runs as
    its paper specifies unless ``guide`` is on."""
    guide: bool = False
    """the project's search aids, for every method alike (off: each method as published).
    The exact solver's placement on the run's profile is measured as the run's first, HSDAG
    samples around the run's best (its incumbent prior, the only policy that has one), and
    one untried neighbour of the run's best is measured per 10 placements proposed, the
    refitted profile's optimum first at each new best (policies/search/neighbour_guide.py).
    Placements the guide proposes are counted in the budget and marked in the summary."""
    budget: int = 500
    """placements the policy proposes, each measured or (when proposed before) read from
    the cache (the paper: about 500); training stops after the iteration that reaches it,
    so it rounds up to whole iterations (episode_len x episodes_per_iteration placements
    each)."""
    budget_unit: Literal["placements", "measurements"] = "placements"
    """what the budget counts: placements (proposed, the default) or measurements (new
    placements measured; a proposal the cache answers costs nothing), then at most 5x the
    budget in placements proposed (and with --screen 10x in placements screened)."""
    seed: int = 0
    """random seed."""
    init: str = ""
    """a pre-trained policy to fine-tune (the folder or pretrained.pt python -m
    hsdag_ray.pretrain wrote); with --budget 0 it places zero-shot. Its weights are loaded
    into the RLModule before training, and the run's first measured placement (counted in
    the budget) is the policy's greedy one, its second the fastest single device (fitted)
    unless that is the same, so the run never ends worse than either. With a profile of the
    devices, the greedy and zero-shot placements are repaired before they are measured when
    they overflow a device's memory (hsdag_core/fit.py)."""
    init_soften: float = 0.0
    """below 1, a run with --init spreads the pre-trained policy's distribution once after
    loading it (the placer's output layers scaled by this factor, preferences kept in
    order), so a settled policy samples more than its greedy placement (1 = off; 0 = the
    method's own: 0.2 for GDP, off otherwise)."""
    zero_shot_samples: int = 1
    """with --budget 0, placements measured: the policy's greedy one, plus this many minus
    one sampled from it (a sample that overflows is drawn again, up to 10 draws per sample
    and 10 misses in a row, then repaired)."""
    wandb: Literal["offline", "online", "disabled"] = "offline"
    """offline, online or disabled."""
    wandb_project: str = "hsdag_ray"
    """W&B project name."""
    out: str = "runs"
    """folder of run folders."""
    name: str = ""
    """run folder name (default: model-method-time)."""
    checkpoint_every: int = 5
    """iterations between checkpoints."""
    address: str = ""
    """Ray address to join (``auto`` for a running cluster); empty = local Ray."""
    env_runners: int = 1
    """measuring actors (0 = sample in the driver)."""
    torch_threads: int = 1
    """threads of every torch process (driver, learner, EnvRunners); more than one on a
    small machine shared with Ray and OpenVINO makes each update many times slower
    (threads spin waiting for each other)."""
    remeasure_rounds: int = 5
    """with a real backend, the run's best few placements and every baseline are timed
    again this many interleaved rounds at the end, and every reported figure is a
    re-measured one (see hsdag_ray/run/summary.py)."""
    solver_time_limit: float = 120.0
    """seconds the exact solver may take for the optimum; an optimum not proven within it
    is reported as such (optimum_proven, optimum_gap)."""


@dataclass(frozen=True)
class LearningSettings(ReinforceConfig):
    """How a learned method updates its policy (REINFORCE or PPO; PPO reads the learning
    rate and the entropy weight).

    REINFORCE's settings are :class:`policies.reinforce_config.ReinforceConfig`'s; this
    section adds what the run picks for the method."""

    algo: Literal["", Algo] = ""
    """``reinforce`` (the paper's) or ``ppo``; empty = the method's own."""
    reward: Literal["", Reward] = ""
    """inverse (1/latency, HSDAG's), speedup, neg_log, neg_sqrt (-sqrt(latency), the RNN
    placer's); empty = the method's own."""
    start: Literal["uniform", "best_single"] = "uniform"
    """where sampling starts: uniform (every device equally likely, the paper) or
    best_single (the fastest single device's logit starts HSDAG's prior_logit above the
    others' in every group)."""


@dataclass(frozen=True)
class GuideSettings:
    """The details of the guide, the project's search aids (``--guide`` switches them on
    together), open to every method alike; every table says which rows had them."""

    exact_start: Literal["auto", "on", "off"] = "auto"
    """on: measure the exact solver's placement on the run's profile (for the parallel
    objective HEFT's) as the run's first placement, counted in the budget; off: not; auto:
    with guide."""
    etf_start: bool = False
    """a critical-path warm start: measure Baechi's m-ETF placement (earliest-start list
    scheduling within memory) on the run's profile as the run's first placement, counted in
    the budget, for every method that searches (after the exact start's, when both are
    on); needs a profile of every device."""
    neighbour_every: int = -1
    """0 (off), or for every this many placements proposed in the run, measure an untried
    neighbour of the run's best (one node on another device; once all are measured, both
    ends of an edge) as the run's own, counted in the budget
    (policies/search/neighbour_guide.py); -1: 10 with guide unless refit_every is set,
    else 0."""
    neighbour_order: Literal["profile", "random"] = "profile"
    """profile (the default: with a profile of every device, at each new best first the
    exact optimum of the profile refitted to the run's measurements, then the neighbours it
    estimates fastest first, those it says do not fit left out and a single change that
    does not fit replaced by its swaps; in a random order without one) or random (single
    changes in a random order)."""
    imitate_steps: int = 0
    """0 (off), or DOPPLER's imitation start for a learned method: before its first
    measurement the policy takes this many gradient steps towards the exact solver's
    placement on the run's profile (policies/imitate.py; no measurement, so not counted in
    the budget), then learns from measurements as its paper does (needs a profile of every
    device and the sequential objective)."""
    refit_every: int = 0
    """0 (off), or for every this many placements proposed in the run (measured or
    answered from the cache), measure a proposal of --method refit (the exact solver on the
    profile refitted to the run's measurements) as the run's own, counted in the budget
    (policies/search/refit_guide.py; needs a profile of every device and the sequential
    objective)."""
