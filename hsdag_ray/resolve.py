"""What a run measures on: the backend, the devices, the profile, the environment.

:func:`resolve_backend` turns the settings into a backend kind, device names
and (for the simulator, or to compute the exact optimum) a profile;
:func:`default_profile` records the implicit one (the local CPU profiled by
OpenVINO plus a modeled accelerator) once and caches it; :func:`env_config`
is the environment configuration every measuring actor builds its
environment from.
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional

from hsdag_ray.cli import UsageError
from hsdag_ray.config import TrainConfig

__all__ = ["default_profile", "resolve_backend", "env_config"]


def default_profile(model: str, say) -> "Any":
    """The local CPU profiled with OpenVINO plus a modeled accelerator, cached."""
    from hsdag_ray.core.models import cache_dir
    from envs.profiling import record
    from hsdag_ray.core.profile import Profile

    path = cache_dir().parent / "profiles" / f"{Path(model).stem}-CPU-GPU_MODEL.json"
    if path.is_file():
        return Profile.load(path), path
    say(f"profiling {model} on the local CPU with OpenVINO (once; cached in {path.parent})")
    prof = record(model, ["CPU"], ["GPU_MODEL"], fit=0, progress=False)
    # one stage boundary costs about half a millisecond on CPU devices (fitted on
    # ResNet-50 splits); without it fine-grained placements look free
    prof.boundary_s = 5e-4
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.save(path)
    return prof, path


def resolve_backend(cfg: TrainConfig, say) -> tuple[str, list[str], Optional[dict]]:
    """Backend kind, device names and profile (as a dict) for the run."""
    from hsdag_ray.core.profile import Profile

    backend, devices = cfg.backend, list(cfg.devices)
    if backend == "default":
        import openvino as ov

        real = [d for d in ov.Core().available_devices]
        if len(real) >= 2:
            backend, devices = "auto", devices or real
            say(f"measuring on the real devices {', '.join(devices)}")
        else:
            backend = "simulator"
            say(f"only {', '.join(real) or 'no device'} here: using the simulator with the CPU "
                "profiled by OpenVINO and a modeled accelerator (GPU_MODEL); pass --backend auto "
                "--devices CPU,CPU_F32 to measure on two CPU configurations instead")
    if backend == "simulator":
        if cfg.profile:
            prof = Profile.load(cfg.profile)
        else:
            prof, path = default_profile(cfg.model, say)
        devices = devices or prof.device_names
        missing = [d for d in devices if d not in prof.devices]
        if missing:
            raise UsageError(f"device {missing[0]} is not in the profile (it has "
                             f"{', '.join(prof.device_names)})")
        return backend, devices, prof.to_json()
    from hsdag_ray.cli import resolve_devices

    devices = resolve_devices(devices or ["CPU", "CPU_F32"], cfg.threads)
    if len(devices) < 2:
        raise UsageError("placement needs at least two devices; add one with --devices")
    # a profile of the same devices lets the exact solvers' placement be measured too
    return backend, devices, Profile.load(cfg.profile).to_json() if cfg.profile else None


def env_config(cfg: TrainConfig, backend: str, devices: list[str], profile: Optional[dict],
               store: str) -> dict[str, Any]:
    from envs.base import TimingConfig

    timing = TimingConfig(repeats=cfg.repeats, threads=cfg.threads, timeout_s=cfg.timeout)
    return {"model": cfg.model, "coarsen": cfg.coarsen, "backend": backend, "devices": devices,
            "profile": profile, "objective": cfg.objective, "reward": cfg.reward,
            "episode_len": cfg.episode_len, "failure_factor": cfg.failure_factor,
            "features": asdict(cfg.features()), "timing": asdict(timing), "store": store}
