"""What a run measures on: the backend, the devices, the profile, the environment.

:func:`resolve_backend` turns the settings into a backend kind, device names
and (for the simulator, or to compute the exact optimum) a profile;
:func:`default_profile` records the implicit one (the local CPU profiled by
OpenVINO plus a modeled accelerator) once and caches it; :func:`env_config`
is the environment configuration every measuring actor builds its
environment from.
"""
from __future__ import annotations

import dataclasses
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional, Sequence

from envs.backends import get as get_backend
from hsdag_ray.cli import UsageError
from hsdag_ray.config import TrainConfig
from hsdag_ray.rundir import model_label

__all__ = ["DEFAULT_ACCELERATOR", "default_devices", "default_profile", "resolve_backend", "reads_incumbent",
           "samples_around_incumbent", "incumbent_prior", "neighbour_every", "resolved", "guide_of",
           "guided_by", "exact_start_applies", "unmet_needs",
           "screen_needs", "guide_needs", "check_method_inputs", "env_config"]


#: the modeled accelerator of a simulator run that names no devices: 64 MB of memory,
#: so ResNet-50 (98 MB of weights) must be split and the optimum is a real split
DEFAULT_ACCELERATOR = "GPU_SMALLMEM"


def default_devices(backend: str) -> list[str]:
    """The devices a run on the real backend ``backend`` measures on when it names none
    (its :attr:`envs.backends.BackendKind.default_devices`: two configurations of the CPU,
    the torch backend's ``cpu`` and ``cpu:bf16``, OpenVINO's ``CPU`` and ``CPU_F32``)."""
    return list(get_backend(backend).default_devices)


#: bumped when implicit profiles are recorded differently (2: modeled devices
#: scaled to the host), so older cached ones are recorded again
PROFILE_FORMAT = 2


def _content_tag(model: str) -> str:
    """``""`` for a zoo model; for a file, a short hash of its content, so two
    different files of the same name never share a cached profile."""
    import hashlib

    path = Path(model)
    if not path.is_file():
        return ""
    h = hashlib.blake2b(path.read_bytes(), digest_size=6)
    weights = path.with_suffix(".bin")
    if weights.is_file():
        h.update(str(weights.stat().st_size).encode())
    return "-" + h.hexdigest()


def default_profile(model: str, devices: Sequence[str], input_shape: str, threads: int,
                    say) -> tuple[Any, Path]:
    """The implicit profile of a simulator run, recorded once and cached.

    ``devices`` are the run's devices: modeled ones (``GPU_MODEL``,
    ``GPU_SMALLMEM``, ``CPU_MODEL``) come from their specs, the others are
    profiled with OpenVINO here (default: the local CPU plus
    :data:`DEFAULT_ACCELERATOR`). A profile recorded while the machine was
    busy (which inflates some ops' times unevenly) is used for that run but
    recorded again by the first run that finds the machine idle.
    """
    from envs.profiling import busy_note, record
    from hsdag_core.compgraph import parse_input_shapes
    from hsdag_core.models import cache_dir, load_model
    from hsdag_core.device_profile import MODELED_DEVICES, Profile, default_boundary_s

    devices = list(devices) or ["CPU", DEFAULT_ACCELERATOR]
    modeled = [d for d in devices if d in MODELED_DEVICES]
    measured = [d for d in devices if d not in MODELED_DEVICES]
    if measured:
        from hsdag_ray.cli import resolve_devices

        measured = resolve_devices(measured, threads)
    shape = "-" + input_shape.replace(",", "x").replace(":", "_").replace(";", "_") if input_shape else ""
    path = (cache_dir().parent / "profiles"
            / f"{model_label(model)}{_content_tag(model)}{shape}-{'-'.join(measured + modeled)}"
               f"-p{PROFILE_FORMAT}.json")
    if path.is_file():
        prof = Profile.load(path)
        busy_then = any("note" in d for d in prof.devices.values())
        if not (busy_then and measured and busy_note() is None):
            if busy_then:
                say(f"the cached profile {path.name} was recorded on a busy machine; it is "
                    "recorded again by the first run on an idle machine")
            return prof, path
        say(f"the cached profile {path.name} was recorded on a busy machine; recording it again "
            "now that the machine is idle")
    if Path(model).suffix.lower() in (".xml", ".onnx"):  # a user's file: say what is wrong first
        load_model(model, parse_input_shapes(input_shape))
    what = ", ".join(measured) if measured else "no device"
    say(f"profiling {model} on {what} with OpenVINO"
        + (f", modeling {', '.join(modeled)}" if modeled else "")
        + f" (once; cached in {path.parent})")
    fit = 12 if len(measured) >= 2 else 0
    prof = record(model, measured, modeled, fit=fit, input_shapes=parse_input_shapes(input_shape),
                  progress=False)
    if not prof.fit:
        # without a boundary cost fine-grained placements look free
        prof.boundary_s = default_boundary_s(prof)
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.save(path)
    return prof, path


def resolve_backend(cfg: TrainConfig, say) -> tuple[str, list[str], Optional[dict]]:
    """Backend kind, device names and profile (as a dict) for the run."""
    from hsdag_core.device_profile import Profile

    from hsdag_core.doppler import doppler_profile, is_doppler_spec

    backend, devices = cfg.env.backend, list(cfg.env.devices)
    doppler = is_doppler_spec(cfg.run.model)
    if doppler and backend == "default":
        backend = "simulator"
    if doppler and not get_backend(backend).simulated:
        raise UsageError(f"{cfg.run.model} is one of DOPPLER's compute graphs, which only the "
                         "simulator measures; use --backend simulator")
    if backend == "default":
        import openvino as ov

        real = [d for d in ov.Core().available_devices]
        if len(real) >= 2:
            backend, devices = "auto", devices or real
            say(f"measuring on the real devices {', '.join(devices)}")
        else:
            backend = "simulator"
            say(f"only {', '.join(real) or 'no device'} here: using the simulator with the CPU "
                f"profiled by OpenVINO and a modeled accelerator ({DEFAULT_ACCELERATOR}); pass "
                "--backend auto --devices CPU,CPU_F32 to measure on two CPU configurations instead")
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

    if cfg.aids.screen <= 0:
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
    if cfg.aids.imitate_steps > 0:
        from policies.registry import get

        if get(cfg.run.method).kind != "rl":
            return (f"--imitate-steps starts a learned policy by imitation; {cfg.run.method} "
                    "learns no policy, so drop it")
        if cfg.env.objective != "sequential":
            return (f"--imitate-steps imitates the sequential objective's exact placement; drop "
                    f"it for the {cfg.env.objective} objective")
        lacks = _profile_lacks(devices, profile)
        if lacks:
            return (f"--imitate-steps imitates the exact placement on the run's profile of every "
                    f"device, and the run has {lacks}; give one with --profile FILE")
    if cfg.aids.etf_start:
        from policies.registry import get

        if get(cfg.run.method).kind == "solver":
            return (f"--etf-start warm-starts the methods that search; {cfg.run.method} computes "
                    "one placement, so drop it")
        lacks = _profile_lacks(devices, profile)
        if lacks:
            return (f"--etf-start solves m-ETF on the run's profile of every device, and the run "
                    f"has {lacks}; give one with --profile FILE")
    if cfg.aids.refit_every > 0 and every > 0:
        return "--refit-every and --neighbour-every both queue the run's proposals; use one of them"
    if cfg.aids.refit_every <= 0:
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
    if cfg.aids.neighbour_every >= 0:
        return cfg.aids.neighbour_every
    return NEIGHBOUR_EVERY if cfg.run.guide and cfg.aids.refit_every <= 0 else 0


def resolved(cfg: TrainConfig, prior_device: int = -1) -> TrainConfig:
    """``cfg`` with what ``--guide`` decides written out (``incumbent_prior``,
    ``neighbour_every``) and HSDAG's ``prior_device`` (``--start best_single``: the fastest
    single device's index; -1 none), so the method's own settings read plain numbers."""
    hsdag = dataclasses.replace(cfg.hsdag, incumbent_prior=incumbent_prior(cfg),
                                prior_device=prior_device)
    return dataclasses.replace(cfg, hsdag=hsdag,
                               aids=dataclasses.replace(cfg.aids, neighbour_every=neighbour_every(cfg)))


def guide_of(cfg: TrainConfig) -> Optional[str]:
    """Which guide queues the run's suggested placements: ``"refit"`` (``--refit-every``),
    ``"neighbours"`` (``--neighbour-every``, resolved) or None."""
    if cfg.aids.refit_every > 0:
        return "refit"
    return "neighbours" if neighbour_every(cfg) > 0 else None


def reads_incumbent(cfg: TrainConfig) -> bool:
    """Whether the run's environment carries the incumbent's features: ``--incumbent``, or
    a method that samples around the incumbent (HSDAG with the prior on)."""
    return cfg.env.incumbent or samples_around_incumbent(cfg)


def exact_start_applies(cfg: TrainConfig, backend: str) -> bool:
    """Whether the run measures the exact solver's placement on its profile as its own
    first one: ``--exact-start`` resolved (:meth:`TrainConfig.starts_exact`: auto is
    ``--guide``), for every method alike."""
    return cfg.starts_exact(backend)


def guided_by(cfg: TrainConfig, backend: str) -> list[str]:
    """The search aids the run has, in words, for the summary and tables (empty: the
    method as published)."""
    aids = []
    if exact_start_applies(cfg, backend):
        aids.append("exact start")
    if cfg.aids.etf_start:
        aids.append("m-ETF start")
    if cfg.aids.imitate_steps > 0:
        aids.append("imitation start")
    if samples_around_incumbent(cfg):
        aids.append("incumbent prior")
    kind = guide_of(cfg)
    if kind == "neighbours":
        aids.append("untried neighbours")
    elif kind == "refit":
        aids.append("refit's proposals")
    return aids


def env_config(cfg: TrainConfig, backend: str, devices: list[str], profile: Optional[dict],
               store: str) -> dict[str, Any]:
    """The environment's settings (:class:`envs.env_config.EnvConfig` as a mapping): every
    field of it that a section of the run has under the same name, the run's sections
    ``timing`` and ``features`` as they are, and what the run resolved (the backend, the
    devices, the profiles, the reward, whether the incumbent is read and suggestions
    queued)."""
    from envs.env_config import EnvConfig

    env_names = {f.name for f in dataclasses.fields(EnvConfig)}
    shared = {name: getattr(getattr(cfg, section), name)
              for section in ("run", "env", "learning", "aids")
              for name in (f.name for f in dataclasses.fields(getattr(cfg, section)))
              if name in env_names}
    return {**shared, "backend": backend, "devices": devices, "profile": profile,
            "reward": reward_of_run(cfg), "features": asdict(cfg.features),
            "timing": asdict(cfg.timing), "store": store, "incumbent": reads_incumbent(cfg),
            "sim_profile": _profile_json(cfg.env.sim_profile), "suggestions": guide_of(cfg) is not None}


def _profile_json(path: str) -> Optional[dict]:
    from hsdag_core.device_profile import Profile

    return Profile.load(path).to_json() if path else None


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
