"""The implicit profile of a simulator run that gives none: the run's devices (the local CPU
profiled by OpenVINO plus a modeled accelerator by default) recorded once and cached."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from hsdag_ray.run.rundir import model_label

__all__ = ["DEFAULT_ACCELERATOR", "PROFILE_FORMAT", "default_profile"]


#: the modeled accelerator of a simulator run that names no devices: 64 MB of memory,
#: so ResNet-50 (98 MB of weights) must be split and the optimum is a real split
DEFAULT_ACCELERATOR = "GPU_SMALLMEM"


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
