"""A run resolved once: :func:`resolve_run` builds the one :class:`ResolvedRun` of a run.

The settings as given say what a user asked for (``--backend default``, ``--guide``,
``--incumbent-prior -1``); what they amount to (the backend kind, the devices, the profile,
the method's registry entry, what ``--guide`` turns on, the reward, the environment's
settings) is decided here, once, by :func:`resolve_run`, and handed down whole:
a training run (:func:`hsdag_ray.run.training.train`) passes it to its start
(:mod:`hsdag_ray.run.run_start`), its driver (:mod:`hsdag_ray.run.drivers`) and its guide, and :func:`hsdag_ray.run.inprocess.run_method` to
its measurer and learner. No one downstream recomputes a derived setting. The steps it
takes are :mod:`hsdag_ray.run.resolve`'s functions.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional

from hsdag_ray.run.config import TrainConfig
from policies.registry import Method

__all__ = ["ResolvedRun", "resolve_run"]


@dataclasses.dataclass(frozen=True)
class ResolvedRun:
    """Everything a run decided before it starts; built by :func:`resolve_run` only."""

    #: the settings as given (a pre-trained checkpoint's network, features and reward adopted
    #: where the run leaves them at their defaults)
    given: TrainConfig
    #: ``given`` with what ``--guide`` decides written out (``incumbent_prior``,
    #: ``neighbour_every``): what ``config.json`` and W&B record, and a resumed run reads
    settings: TrainConfig
    #: ``settings`` as the run runs them: the method's algorithm and the EnvRunners it gets
    cfg: TrainConfig
    #: the method's entry in :mod:`policies.registry`
    method: Method
    #: the backend kind (never ``"default"``), the devices and the profile (a dict, or None)
    backend: str
    devices: tuple[str, ...]
    profile: Optional[dict]
    #: whether placements are measured on measuring machines (a real backend, or a
    #: simulator with a measuring time standing for one)
    real: bool
    #: the reward (``--reward`` or the method's own) and the algorithm (``--algo`` or its own)
    reward: str
    algo: str
    #: HSDAG's incumbent prior (0: off, or a method without one) and whether it is on
    incumbent_prior: float
    samples_around_incumbent: bool
    #: one untried neighbour of the best per this many proposals (0: off)
    neighbour_every: int
    #: which guide queues suggested placements: ``"refit"``, ``"neighbours"`` or None
    guide_proposer: Optional[str]
    #: whether the environment carries the incumbent's features
    reads_incumbent: bool
    #: whether the run measures the exact solver's placement on its profile first
    starts_exact: bool
    #: whether the run measures its own profile (then the exact solver's placement is the optimum)
    profile_measured: bool
    #: the parts of the guide the run has, in words (empty: the method as published; the
    #: summary's ``guided_by``)
    guide_parts: tuple[str, ...]
    #: the environment's settings (:class:`envs.env_config.EnvConfig` as a mapping), what
    #: every measuring actor builds its environment from (None in one process: the run is
    #: handed its graph and backend)
    env_config: Optional[dict] = dataclasses.field(repr=False)
    #: the pre-trained checkpoint of ``--init`` (None without)
    ckpt: Optional[Mapping[str, Any]] = dataclasses.field(default=None, repr=False)
    #: what each measuring actor asks for besides its GPUs (None: the simulator, or not yet
    #: known: :meth:`with_runners` sets it once Ray has said what the cluster holds)
    resources: Optional[dict] = None

    def with_runners(self, env_runners: int, resources: Optional[dict]) -> "ResolvedRun":
        """This run with the EnvRunners and measuring resources the cluster gives it."""
        return dataclasses.replace(self, cfg=self.cfg.replace(env_runners=env_runners),
                                   resources=resources)

    def to_json(self) -> dict[str, Any]:
        """What ``config.json`` holds: the settings (``train``, what a resumed run reads) and
        what the run resolved them to."""
        return {"train": self.settings.to_dict(),
                "resolved": {"backend": self.backend, "devices": list(self.devices),
                             "env_runners": self.cfg.run.env_runners, "algo": self.algo,
                             "reward": self.reward}}

    def method_settings(self, prior_device: int = -1) -> TrainConfig:
        """The run's settings as the method's network reads them: ``cfg`` with HSDAG's
        ``prior_device`` (``--start best_single``: the fastest single device's index; -1 none)."""
        if prior_device == self.cfg.hsdag.prior_device:
            return self.cfg
        return dataclasses.replace(self.cfg, hsdag=dataclasses.replace(self.cfg.hsdag,
                                                                       prior_device=prior_device))


def resolve_run(cfg: TrainConfig, say: Callable[[str], Any] = print, *, store: str = "",
                measured_by=None, check: bool = True) -> ResolvedRun:
    """The run of ``cfg``, resolved once.

    Args:
        cfg: the run's settings as given.
        say: where the choices the run makes for the user are said (the backend picked).
        store: the name of the run's measurement store actor ("" none), for the environment.
        measured_by: an :class:`envs.base.Backend` already built (an in-process run): its
            name and devices are the run's, and no profile is resolved; None: the backend,
            devices and profile are resolved from the settings
            (:func:`hsdag_ray.run.resolve.resolve_backend`).
        check: refuse, before anything starts, a method, screen or guide that reads what
            the run does not have (:func:`hsdag_ray.run.resolve.check_method_inputs`); only
            with the backend resolved here.
    """
    from envs.backends import is_real
    from hsdag_ray.run import resolve
    from policies.registry import get

    method = get(cfg.run.method)
    ckpt = None
    if cfg.run.init:  # a checkpoint of another method is refused before anything starts
        from hsdag_ray.run.pretrained import (adopt_settings, check_method, init_soften_factor,
                                              read_pretrained)

        ckpt = read_pretrained(cfg.run.init)
        check_method(ckpt, cfg.run.method)
        cfg = adopt_settings(cfg, ckpt)
        init_soften_factor(cfg, method)  # a factor the policy cannot apply: refused here
    if measured_by is None:
        backend, devices, profile = resolve.resolve_backend(cfg, say)
        if check:
            resolve.check_method_inputs(cfg, devices, profile)
        real = is_real(backend) or cfg.env.sim_delay_s > 0
    else:
        backend = getattr(measured_by, "name", type(measured_by).__name__)
        devices, profile = list(measured_by.devices), None
        real = not measured_by.simulated
    settings = resolve.resolved(cfg)
    algo = cfg.learning.algo or method.algo
    return ResolvedRun(
        given=cfg, settings=settings, cfg=settings.replace(algo=algo), method=method,
        backend=backend, devices=tuple(devices), profile=profile, real=real,
        reward=resolve.reward_of_run(cfg), algo=algo,
        incumbent_prior=settings.hsdag.incumbent_prior,
        samples_around_incumbent=resolve.samples_around_incumbent(cfg),
        neighbour_every=settings.guide.neighbour_every, guide_proposer=resolve.guide_proposer(cfg),
        reads_incumbent=resolve.reads_incumbent(cfg), starts_exact=cfg.starts_exact(backend),
        profile_measured=cfg.profile_measured(backend),
        guide_parts=tuple(resolve.guide_parts(cfg, backend)),
        env_config=None if measured_by is not None else
        resolve.env_config(cfg, backend, list(devices), profile, store),
        ckpt=ckpt)
