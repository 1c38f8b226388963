"""A placement applied with PyTorch (``python -m hsdag_ray.apply --backend torch``).

The placement runs split into torch stages, timed next to each device alone and the
backend's own splits (Accelerate's ``device_map="auto"``), interleaved; its outputs are
compared with the unsplit program's within :data:`envs.pytorch.backend.TOLERANCE`, and
``--save DIR`` writes the exported program, its inputs and the placement
(:mod:`envs.pytorch.saved`), loads it back and compares its outputs too.
"""
from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, Callable

from envs.base import Measurement
from envs.deploy import (ApplyJob, SaveError, combine, interleave, output_error, result_head, row,
                         staged, versus)

__all__ = ["apply_torch"]


def apply_torch(job: ApplyJob) -> dict[str, Any]:
    """The placement split into torch stages, each device alone and the backend's own splits;
    saved and checked with ``job.save``."""
    from envs.pytorch.backend import TOLERANCE, TorchBackend

    program, names = job.model, job.names
    affinity = job.graph.expand_placement(job.placement)
    backend = TorchBackend(job.graph, program, job.specs, job.timing)
    placed = backend.measure_ops(affinity)
    result = result_head(job, placed)
    if not placed.ok:
        result["error"] = f"the placement failed at {placed.stage}: {placed.error}"
        return result
    jobs: dict[str, Callable[[], Measurement]] = {"placement": lambda: backend.measure_ops(affinity)}
    for name in names:
        jobs[name] = partial(backend.measure_ops, {op: name for op in affinity})
    for name, own in backend.own_baselines().items():
        jobs[name] = (partial(Measurement.failure, backend.name, "baseline", own) if isinstance(own, str)
                      else partial(backend.measure_array, own))
    rounds = interleave(jobs, placed, job.rounds)
    placed = combine(rounds["placement"])
    tolerance = max(TOLERANCE[backend.by_name[d].dtype] for d in job.placement.values())
    outputs = backend.outputs(affinity)
    reference = [t.numpy() for t in backend.reference()]
    max_abs, max_rel = output_error([t.numpy() for t in outputs], reference)
    placed.info.update(max_abs_error=max_abs, max_rel_error=max_rel, tolerance=tolerance)
    rows = {}
    for key, ms in rounds.items():
        label = {"placement": "placement", "accelerate_auto": "Accelerate device_map=auto"}.get(
            key, f"{key} only" if key in names else key)
        rows[key] = r = row(label, placed if key == "placement" else combine(ms))
        r["info"].setdefault("path", "torch")
        staged(r)  # the table's "how": torch, N stages
        if "output_error" in r["info"]:
            r["info"].setdefault("max_rel_error", r["info"]["output_error"])
    result["placed"] = rows.pop("placement")
    result["single"] = {name: rows[name] for name in names}
    result["own"] = {key: r for key, r in rows.items() if key not in names}
    for r in [*result["single"].values(), *result["own"].values()]:
        versus(r, placed)
    if job.save:
        from envs.open_saved import load_placed
        from envs.pytorch.saved import save_placed

        try:
            save_placed(job.save, program, affinity, job.specs)
            loaded = load_placed(job.save)
        except (ValueError, OSError) as exc:
            raise SaveError(f"cannot save the placed model to {job.save}: {exc}") from None
        max_abs, max_rel = output_error([t.numpy() for t in loaded(*program.example_inputs)], reference)
        result["saved"] = {"dir": str(Path(job.save).resolve()), "path": "torch",
                           "stages": len(loaded.stages), "max_abs_error": max_abs,
                           "max_rel_error": max_rel, "tolerance": tolerance, "ok": max_rel <= tolerance}
    return result
