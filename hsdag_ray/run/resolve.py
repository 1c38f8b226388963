"""The steps that resolve a run: the backend, the devices, the profile, the guide, the environment.

:func:`hsdag_ray.run.resolved_run.resolve_run` takes these steps once per run and hands its
:class:`~hsdag_ray.run.resolved_run.ResolvedRun` down; the commands and the in-process runner
read that object rather than call them. :func:`resolve_backend` turns the settings into a
backend kind, device names and (for the simulator, or to compute the exact optimum) a
profile; :func:`default_profile` (:mod:`hsdag_ray.run.implicit_profile`) records the implicit
one (the local CPU profiled by OpenVINO plus a modeled accelerator) once and caches it;
what ``--guide`` turns on is :func:`incumbent_prior`, :func:`neighbour_every`,
:func:`guide_proposer`, :func:`reads_incumbent` and :func:`guide_parts`; :func:`env_config` is the
environment configuration every measuring actor builds its environment from.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

from envs.backends import REAL_DEFAULT, SIMULATOR, get as get_backend
from hsdag_ray.cli import UsageError
from hsdag_ray.run.config import TrainConfig
from hsdag_ray.run.implicit_profile import DEFAULT_ACCELERATOR, default_profile

__all__ = ["DEFAULT_ACCELERATOR", "default_devices", "default_profile", "resolve_backend", "reads_incumbent",
           "samples_around_incumbent", "incumbent_prior", "neighbour_every", "resolved", "guide_proposer",
           "guide_parts", "unmet_needs", "screen_needs", "guide_needs", "check_method_inputs", "env_config"]


def default_devices(backend: str) -> list[str]:
    """The devices a run on the real backend ``backend`` measures on when it names none
    (its :attr:`envs.backends.BackendKind.default_devices`: two configurations of the CPU,
    the torch backend's ``cpu`` and ``cpu:bf16``, OpenVINO's ``CPU`` and ``CPU_F32``)."""
    return list(get_backend(backend).default_devices)


def resolve_backend(cfg: TrainConfig, say) -> tuple[str, list[str], Optional[dict]]:
    """Backend kind, device names and profile (as a dict) for the run."""
    from hsdag_core.device_profile import Profile

    from hsdag_core.doppler import doppler_profile, is_doppler_spec

    backend, devices = cfg.env.backend, list(cfg.env.devices)
    doppler = is_doppler_spec(cfg.run.model)
    if doppler and backend == "default":
        backend = SIMULATOR
    if doppler and not get_backend(backend).simulated:
        raise UsageError(f"{cfg.run.model} is one of DOPPLER's compute graphs, which only the "
                         "simulator measures; use --backend simulator")
    if backend == "default":
        real = get_backend(REAL_DEFAULT).graph.available()
        if len(real) >= 2:
            backend, devices = REAL_DEFAULT, devices or real
            say(f"measuring on the real devices {', '.join(devices)}")
        else:
            backend = SIMULATOR
            say(f"only {', '.join(real) or 'no device'} here: using the simulator with the CPU "
                f"profiled by OpenVINO and a modeled accelerator ({DEFAULT_ACCELERATOR}); pass "
                f"--backend {REAL_DEFAULT} --devices CPU,CPU_F32 to measure on two CPU "
                "configurations instead")
    if get_backend(backend).simulated:
        if devices:  # refused before a profile is recorded for them
            check_two_devices(devices)
        if cfg.env.profile:
            prof = Profile.load(cfg.env.profile)
        elif doppler:  # the file's own costs, on its GPUs
            try:
                prof = doppler_profile(cfg.run.model)
            except ValueError as e:
                raise UsageError(str(e)) from None
        else:
            prof, _ = default_profile(cfg.run.model, devices, cfg.run.input_shape, cfg.timing.threads, say)
        if not devices and len(prof.devices) < 2:
            raise UsageError(f"the profile {cfg.env.profile} has only {', '.join(prof.device_names)}, "
                             "and placement needs at least two devices; record one of two with "
                             "python -m hsdag_ray.profile (e.g. --devices CPU --modeled GPU_MODEL)")
        devices = devices or prof.device_names
        missing = [d for d in devices if d not in prof.devices]
        if missing:
            raise UsageError(f"device {missing[0]} is not in the profile {cfg.env.profile} (it has "
                             f"{', '.join(prof.device_names)}); record one with it with "
                             "python -m hsdag_ray.profile, or leave out --profile")
        if cfg.env.sim_profile:
            sim = Profile.load(cfg.env.sim_profile)
            absent = [d for d in devices if d not in sim.devices]
            if absent:
                raise UsageError(f"device {absent[0]} is not in the simulator's profile "
                                 f"{cfg.env.sim_profile} (it has {', '.join(sim.device_names)}); "
                                 "give --sim-profile a profile of the run's devices")
        return backend, devices, prof.to_json()
    from hsdag_ray.cli import resolve_devices

    default = default_devices(backend)
    check_two_devices(devices or default, real=True)
    devices = resolve_devices(devices or default, cfg.timing.threads, backend, here=not cfg.run.address)
    # a profile of the same devices lets the exact solvers' placement be measured too
    return backend, devices, Profile.load(cfg.env.profile).to_json() if cfg.env.profile else None


def unmet_needs(cfg: TrainConfig, devices: Optional[Sequence[str]] = None,
                profile: Optional[dict] = None) -> str:
    """What a run leaves a method that reads the run's profile (``costs``) without, in one
    sentence ("" when nothing): its objective, and a profile of every device. Before the
    backend is resolved (``devices`` None) only a real backend without ``--profile`` is
    known to lack one (the simulator always has one)."""
    from policies.registry import get

    method = get(cfg.run.method)
    if not method.costs:
        return ""
    if method.objectives and cfg.env.objective not in method.objectives:
        return (f"--method {cfg.run.method} models the {' and '.join(method.objectives)} "
                f"objectives; use one of them, or another method for the {cfg.env.objective} objective")
    if devices is None:
        known_real = cfg.env.backend != "default" and get_backend(cfg.env.backend).real
        lacks = "none" if known_real and not cfg.env.profile else ""
    else:
        lacks = _profile_lacks(devices, profile)
    if not lacks:
        return ""
    return (f"--method {cfg.run.method} reads the run's profile of every device, and the run has "
            f"{lacks}; record one with python -m hsdag_ray.profile and give it with --profile FILE")


def screen_needs(cfg: TrainConfig, devices: Sequence[str], profile: Optional[dict]) -> str:
    """What ``--screen`` lacks in the run, in one sentence ("" when nothing or off)."""
    from policies.registry import get

    if cfg.env.screen <= 0:
        return ""
    if get(cfg.run.method).costs:
        return (f"--method {cfg.run.method} proposes its latency model's own optimum, so there is "
                "nothing to screen; drop --screen")
    if cfg.env.objective != "sequential":
        return f"--screen predicts the sequential objective; drop it for the {cfg.env.objective} objective"
    lacks = _profile_lacks(devices, profile)
    if lacks:
        return (f"--screen predicts latencies from the run's profile of every device, and the run has "
                f"{lacks}; give one with --profile FILE")
    return ""


def guide_needs(cfg: TrainConfig, devices: Sequence[str], profile: Optional[dict]) -> str:
    """What ``--refit-every``, ``--neighbour-every``, ``--etf-start`` or ``--imitate-steps``
    lacks in the run, in one sentence ("" when nothing or off)."""
    every = neighbour_every(cfg)
    if cfg.guide.imitate_steps > 0:
        from policies.registry import get

        if get(cfg.run.method).approach != "rl":
            return (f"--imitate-steps starts a learned policy by imitation; {cfg.run.method} "
                    "learns no policy, so drop it")
        if cfg.env.objective != "sequential":
            return (f"--imitate-steps imitates the sequential objective's exact placement; drop "
                    f"it for the {cfg.env.objective} objective")
        lacks = _profile_lacks(devices, profile)
        if lacks:
            return (f"--imitate-steps imitates the exact placement on the run's profile of every "
                    f"device, and the run has {lacks}; give one with --profile FILE")
    if cfg.guide.etf_start:
        from policies.registry import get

        if get(cfg.run.method).approach == "solver":
            return (f"--etf-start warm-starts the methods that search; {cfg.run.method} computes "
                    "one placement, so drop it")
        lacks = _profile_lacks(devices, profile)
        if lacks:
            return (f"--etf-start solves m-ETF on the run's profile of every device, and the run "
                    f"has {lacks}; give one with --profile FILE")
    if cfg.guide.refit_every > 0 and every > 0:
        return "--refit-every and --neighbour-every both queue the run's proposals; use one of them"
    if cfg.guide.refit_every <= 0:
        return ""
    if cfg.env.objective != "sequential":
        return (f"--refit-every refits the sequential objective; drop it for the {cfg.env.objective} "
                "objective")
    lacks = _profile_lacks(devices, profile)
    if lacks:
        return (f"--refit-every refits the run's profile of every device, and the run has {lacks}; "
                "give one with --profile FILE")
    return ""


def _profile_lacks(devices: Sequence[str], profile: Optional[dict]) -> str:
    """"" when ``profile`` has every device, else what the run has: "no DEVICE" or "none"."""
    from hsdag_core.device_profile import Profile

    known = Profile.from_json(profile).devices if profile else {}
    missing = [d for d in devices if d not in known]
    return "" if not missing else f"no {missing[0]}" if profile else "none"


def check_method_inputs(cfg: TrainConfig, devices: Sequence[str], profile: Optional[dict]) -> None:
    """Refuse, before anything starts, a method, a screen or refit's proposals that read what
    the run does not have (:func:`unmet_needs`, :func:`screen_needs`, :func:`guide_needs` of
    the resolved devices and profile)."""
    why = (unmet_needs(cfg, devices, profile) or screen_needs(cfg, devices, profile)
           or guide_needs(cfg, devices, profile))
    if why:
        raise UsageError(why)


def reward_of_run(cfg: TrainConfig) -> str:
    """The run's reward: ``--reward``, or the method's own when none is given."""
    from policies.registry import get

    return cfg.learning.reward or get(cfg.run.method).reward


#: HSDAG's incumbent prior with ``--guide`` (``--incumbent-prior -1``): the logit by which
#: each group leans toward the incumbent's device (about 0.88 with two devices)
GUIDE_INCUMBENT_PRIOR = 2.0
#: ``--neighbour-every`` with ``--guide`` (``-1``): one untried neighbour of the run's best
#: per this many placements proposed
NEIGHBOUR_EVERY = 10


def incumbent_prior(cfg: TrainConfig) -> float:
    """``--incumbent-prior`` resolved: as given, or (-1) :data:`GUIDE_INCUMBENT_PRIOR` with
    ``--guide`` and 0 without; 0 for a method whose policy has no incumbent prior."""
    from policies.registry import get

    if not get(cfg.run.method).incumbent_prior:
        return 0.0
    if cfg.hsdag.incumbent_prior >= 0:
        return cfg.hsdag.incumbent_prior
    return GUIDE_INCUMBENT_PRIOR if cfg.run.guide else 0.0


def samples_around_incumbent(cfg: TrainConfig) -> bool:
    """Whether the run's policy samples around the incumbent: a method with an incumbent
    prior (HSDAG) and the prior resolved above 0 (:func:`incumbent_prior`)."""
    return incumbent_prior(cfg) > 0


def neighbour_every(cfg: TrainConfig) -> int:
    """``--neighbour-every`` resolved: as given, or (-1) :data:`NEIGHBOUR_EVERY` with
    ``--guide`` unless ``--refit-every`` queues the run's proposals, else 0."""
    if cfg.guide.neighbour_every >= 0:
        return cfg.guide.neighbour_every
    return NEIGHBOUR_EVERY if cfg.run.guide and cfg.guide.refit_every <= 0 else 0


def resolved(cfg: TrainConfig, prior_device: int = -1) -> TrainConfig:
    """``cfg`` with what ``--guide`` decides written out (``incumbent_prior``,
    ``neighbour_every``) and HSDAG's ``prior_device`` (``--start best_single``: the fastest
    single device's index; -1 none), so the method's own settings read plain numbers."""
    hsdag = dataclasses.replace(cfg.hsdag, incumbent_prior=incumbent_prior(cfg),
                                prior_device=prior_device)
    return dataclasses.replace(cfg, hsdag=hsdag,
                               guide=dataclasses.replace(cfg.guide, neighbour_every=neighbour_every(cfg)))


def guide_proposer(cfg: TrainConfig) -> Optional[str]:
    """Which guide queues the run's suggested placements: ``"refit"`` (``--refit-every``),
    ``"neighbours"`` (``--neighbour-every``, resolved) or None."""
    if cfg.guide.refit_every > 0:
        return "refit"
    return "neighbours" if neighbour_every(cfg) > 0 else None


def reads_incumbent(cfg: TrainConfig) -> bool:
    """Whether the run's environment carries the incumbent's features: ``--incumbent``, or
    a method that samples around the incumbent (HSDAG with the prior on)."""
    return cfg.env.incumbent or samples_around_incumbent(cfg)


def guide_parts(cfg: TrainConfig, backend: str) -> list[str]:
    """The parts of the guide the run has, in words, for the summary and tables (empty: the
    method as published)."""
    parts = []
    if cfg.starts_exact(backend):
        parts.append("exact start")
    if cfg.guide.etf_start:
        parts.append("m-ETF start")
    if cfg.guide.imitate_steps > 0:
        parts.append("imitation start")
    if samples_around_incumbent(cfg):
        parts.append("incumbent prior")
    proposer = guide_proposer(cfg)
    if proposer == "neighbours":
        parts.append("untried neighbours")
    elif proposer == "refit":
        parts.append("refit's proposals")
    return parts


def env_config(cfg: TrainConfig, backend: str, devices: list[str], profile: Optional[dict],
               store: str) -> dict[str, Any]:
    """The environment's settings (:class:`envs.env_config.EnvConfig` as a mapping): the
    run's ``env`` section with what the run resolved (the backend, the devices, the
    profiles, the reward, whether the incumbent is read and suggestions queued) and what
    other sections say (the model, the episode length, ``timing`` and ``features``)."""
    from hsdag_core.device_profile import Profile

    sim = Profile.load(cfg.env.sim_profile).to_json() if cfg.env.sim_profile else None
    return dataclasses.replace(
        cfg.env, backend=backend, devices=tuple(devices), profile=profile, sim_profile=sim,
        incumbent=reads_incumbent(cfg), model=cfg.run.model, input_shape=cfg.run.input_shape,
        reward=reward_of_run(cfg), episode_len=cfg.learning.episode_len, features=cfg.features,
        timing=cfg.timing, store=store, suggestions=guide_proposer(cfg) is not None).to_dict()


def check_two_devices(devices: Sequence[str], real: bool = False) -> None:
    """Refuse fewer than two distinct devices: a placement puts each node on one of them,
    so one device leaves nothing to learn or place (a :class:`UsageError` saying so, with
    an example of a second device: a virtual CPU one when ``real``, else a modeled one)."""
    distinct = list(dict.fromkeys(devices))
    if len(distinct) >= 2:
        return
    one = distinct[0] if distinct else "no device"
    other = ("CPU_F32" if one != "CPU_F32" else "CPU") if real else \
        ("GPU_MODEL" if one != "GPU_MODEL" else "CPU_MODEL")
    if len(devices) > 1:
        raise UsageError(f"--devices names {one} {len(devices)} times; placement needs two "
                         f"different devices, e.g. --devices {one},{other}")
    raise UsageError(f"--devices names only {one}, and placement needs at least two devices; "
                     f"add a second (e.g. --devices {one if distinct else 'CPU'},{other})")
