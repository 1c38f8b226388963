"""A placement applied with OpenVINO (``python -m hsdag_ray.apply`` on an OpenVINO backend).

The placement is compiled as ``--backend`` runs it, timed next to each device alone (the
whole model compiled on it, its outputs validated too), OpenVINO's AUTO device and
HETERO's own splits (``hetero_auto``: HETERO's default, each op on the first device in
``--devices`` order that supports it; ``hetero_pipeline``:
``MODEL_DISTRIBUTION_POLICY=PIPELINE_PARALLEL``), interleaved; ``--save DIR`` writes the
placed model (:mod:`envs.openvino.saved`), loads it back in a fresh Core and compares its
outputs with the unsplit model's at f32.
"""
from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, Callable

import numpy as np

from envs.base import Measurement, TimingConfig
from envs.deploy import (ApplyJob, SaveError, combine, interleave, output_error, result_head, row,
                         staged, versus)

__all__ = ["apply_openvino", "HETERO_ROWS"]

#: the table's name of each of OpenVINO's own HETERO splits
HETERO_ROWS = {"hetero_auto": "OpenVINO HETERO (default)",
               "hetero_pipeline": "OpenVINO HETERO pipeline"}


def _reference(model, device_set, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Outputs of the unsplit model at f32 on the first device's hardware."""
    import openvino as ov

    base = next(iter(device_set.specs.values())).base
    compiled = device_set.core.compile_model(model, base, {ov.properties.hint.inference_precision(): ov.Type.f32})
    request = compiled.create_infer_request()
    request.infer([ov.Tensor(a) for a in inputs])
    return [request.get_output_tensor(i).data.copy() for i in range(len(compiled.outputs))]


def apply_openvino(job: ApplyJob) -> dict[str, Any]:
    """The placement compiled as ``job.backend`` runs it, each device alone, OpenVINO AUTO and
    HETERO's own splits, interleaved; saved and checked with ``job.save``."""
    from envs.openvino.auto import HETERO_MODES, measure_auto, measure_hetero_mode
    from envs.openvino.backend import OpenVINOBackend
    from envs.openvino.stages import complete_affinity

    model, specs, timing = job.model, job.specs, job.timing
    affinity = complete_affinity(model, job.graph.expand_placement(job.placement))
    backend = OpenVINOBackend(model, specs, mode=job.backend, timing=timing, seed=job.seed)
    placed = backend.measure_ops(affinity)
    result = result_head(job, placed)
    result.pop("own"), result.pop("saved")
    result.update(auto=None, hetero={}, saved=None)  # its own rows: AUTO, HETERO's splits
    if not placed.ok:
        result["error"] = f"the placement failed at {placed.stage}: {placed.error}"
        return result
    # each device alone, the whole model compiled on it (validated too: its own error), and AUTO
    whole = backend if backend.mode != "pipeline" else OpenVINOBackend(model, specs, "auto", timing, job.seed)
    jobs: dict[str, Callable[[], Measurement]] = {"placement": lambda: backend.measure_ops(affinity)}
    for name in job.names:
        jobs[name] = partial(whole.measure_ops, {op: name for op in affinity})
    unchecked = replace(timing, validate_outputs=False)
    jobs["auto"] = partial(measure_auto, model, specs, unchecked, seed=job.seed)
    for mode in HETERO_MODES:
        jobs[mode] = partial(measure_hetero_mode, model, specs, mode, unchecked, seed=job.seed)
    rounds = interleave(jobs, placed, job.rounds)
    placed = combine(rounds["placement"])
    result["placed"] = row("placement", placed)
    result["single"] = {name: row(f"{name} only", combine(rounds[name])) for name in job.names}
    result["auto"] = row("OpenVINO AUTO", combine(rounds["auto"]))
    result["hetero"] = {mode: row(HETERO_ROWS[mode], combine(rounds[mode])) for mode in HETERO_MODES}
    for r in [*result["single"].values(), result["auto"], *result["hetero"].values()]:
        versus(r, placed)
    for r in [result["placed"], *result["single"].values()]:
        if r["info"].get("path") == "pipeline":  # the table's "how": pipeline, N stages
            staged(r)
    if job.save:
        result["saved"] = _save_and_check(job.save, model, affinity, specs, timing, placed,
                                          backend.device_set, job.seed)
    return result


def _save_and_check(directory: str, model, affinity, specs, timing: TimingConfig,
                    placed: Measurement, device_set, seed: int) -> dict[str, Any]:
    """Write the placed model, load it back in a fresh Core and compare its outputs."""
    from envs.openvino.saved import save_placed
    from envs.openvino.runners import TOLERANCE, random_inputs
    from envs.open_saved import load_placed

    path = str(placed.info.get("path", "pipeline"))
    try:
        save_placed(directory, model, affinity, specs, path, threads=timing.threads)
        loaded = load_placed(directory)
    except (ValueError, OSError) as exc:
        raise SaveError(f"cannot save the placed model to {directory}: {exc}") from None
    inputs = random_inputs(model, seed)
    max_abs, max_rel = output_error(loaded(inputs), _reference(model, device_set, inputs))
    precisions = {device_set.info(d).precision for d in loaded.devices}
    tolerance = max(TOLERANCE.get(p, max(TOLERANCE.values())) for p in precisions)
    return {"dir": str(Path(directory).resolve()), "path": path, "stages": len(loaded.manifest["stages"]),
            "max_abs_error": max_abs, "max_rel_error": max_rel, "tolerance": tolerance,
            "ok": max_rel <= tolerance}
