"""Measuring op-level placements of an OpenVINO model on real devices.

:class:`OpenVINOBackend` measures a placement given as an *affinity*: the
friendly name of every op of the model (Parameters, Constants and Results
included) mapped to a device name (:mod:`envs.openvino.devices`). It runs it
with HETERO (``mode="hetero"``), with its own stage pipeline
(``mode="pipeline"``: :mod:`envs.openvino.stages`), or HETERO with the
pipeline as fallback (``mode="auto"``).

What OpenVINO cannot do becomes a :class:`~envs.base.Measurement` failure,
never an exception: a compile error, an unsupported op, an inference error, an
allocation failure (stage ``memory``), an exhausted time budget (``timeout``,
which callers treat as transient). Only OpenVINO's calls are wrapped
(:func:`envs.openvino.runners.ov_errors`): an exception raised by this
project's own code is a bug and propagates.

OpenVINO 2026.4 behaviour this module works around (seen on this project's
CPU-only machine):

* HETERO cannot create an infer request when a tensor that feeds a shape
  input (ShapeOf -> Reshape) crosses devices ("Can't set the input tensor ...
  incompatible"), which fine-grained splits of transformers always do; the
  stage pipeline handles these placements.
* HETERO over two instances of the CPU plugin runs its sub-models on all
  cores whatever INFERENCE_NUM_THREADS says, so with a thread limit its split
  placements look up to 2x faster than the same placements run by the
  pipeline or single-device runs (which keep the limit). ``auto`` therefore
  also leaves HETERO when it keeps more threads busy than allowed, in a probe
  of a few runs before timing or, when other processes held the cores during
  the probe, in the timing itself (the placement is then timed again with the
  pipeline), and every timing reports ``cpu_per_wall``.
* A plugin crash (segfault) during compile cannot be caught in-process; run
  measurements of untrusted models in a separate process.
"""
from __future__ import annotations

import time
from collections import Counter
from typing import Literal, Mapping, Optional, Sequence

import numpy as np
import openvino as ov

from envs.base import Measurement, TimingConfig, summarize_times
from envs.openvino.devices import DeviceSet
from envs.openvino.op_times import attribute_node_times
from envs.openvino.runners import (
    OV_ERRORS, OVERSUBSCRIPTION, THREAD_PROBE_RUNS, TOLERANCE, RequestRunner, Runner, StageFailure,
    busy_threads, ov_errors, random_inputs, time_runs,
)
from envs.openvino.pipeline import Compiler
from envs.openvino.stages import plan_stages
from hsdag_core.models import openvino_error_text

__all__ = ["Mode", "OpenVINOBackend"]

Mode = Literal["hetero", "pipeline", "auto"]


def _oversubscribed(busy: float, limit: int, when: str = "") -> Optional[str]:
    """The sentence refusing HETERO when it kept ``busy`` threads busy (``when``: "" for the
    probe before timing, " while timed") where each device may use ``limit`` (0: no limit)."""
    if not limit or busy <= limit * OVERSUBSCRIPTION:
        return None
    return (f"HETERO kept {busy:.1f} threads busy{when} where each device may use {limit}, "
            "so its timing is not comparable with other placements")


class OpenVINOBackend:
    """Measures op-level placements of an OpenVINO model on real devices.

    Implements :class:`envs.base.Backend` (``measure`` = :meth:`measure_ops`).

    Attributes:
        name: ``openvino-<mode>``, also the ``backend`` of every Measurement.
        devices: the device names placements may use.
        device_set: the devices and the one Core every compile uses.
        model: the model (never modified).
        mode: ``hetero``, ``pipeline`` or ``auto`` (HETERO, pipeline as fallback).
        timing: how placements are timed.
    """

    def __init__(
        self,
        model: ov.Model,
        devices: Sequence[str],
        mode: Mode = "auto",
        timing: TimingConfig = TimingConfig(),
        seed: int = 0,
    ) -> None:
        """Set up devices and random inputs.

        Args:
            model: a model with static input shapes and unique op friendly names.
            devices: device specs (see module doc). Bad specs do not raise here:
                every measurement then fails with stage ``validate``.
            mode: how placements run.
            timing: warm-up, repeats, timeout, threads per device, validation.
            seed: seed of the random input data.

        Raises:
            ValueError: for an unknown mode, duplicate op friendly names, or
                inputs that cannot be filled (dynamic shape, exotic type).
        """
        if mode not in ("hetero", "pipeline", "auto"):
            raise ValueError(f"unknown mode {mode!r}; use 'hetero', 'pipeline' or 'auto'")
        self.model = model
        self.mode = mode
        self.timing = timing
        self.name = f"openvino-{mode}"
        self.device_set = DeviceSet(devices, default_threads=timing.threads)
        self.devices = self.device_set.names
        names = [op.get_friendly_name() for op in model.get_ordered_ops()]
        duplicates = sorted(n for n, count in Counter(names).items() if count > 1)
        if duplicates:
            raise ValueError("op friendly names must be unique to place ops by name; "
                             f"duplicated: {duplicates[:5]}")
        self._op_names = names
        self._inputs = random_inputs(model, seed)
        self._reference: Optional[list[np.ndarray]] = None
        self.compiler = Compiler(self.device_set.core, model, timing, self._input_tensors())
        self._race_best: Optional[float] = None
        self._hetero_refused: dict[frozenset[str], str] = {}

    # ------------------------------------------------------------------ public

    races = True
    """:meth:`measure` takes ``race`` (see :mod:`envs.racing`)."""

    def measure(self, placement: Mapping[str, str], race: bool = False) -> Measurement:
        """Same as :meth:`measure_ops` (the :class:`~envs.base.Backend` interface)."""
        return self.measure_ops(placement, race)

    def measure_ops(self, affinity: Mapping[str, str], race: bool = False) -> Measurement:
        """Compile and time the placement ``affinity`` (op friendly name -> device).

        Stages compiled for earlier placements are reused (``TimingConfig.stage_cache``).
        With ``race`` (and ``TimingConfig.race``) the placement is timed
        against the best latency of the earlier raced measurements of this
        backend: a clearly slower one is stopped early, a close call is
        timed until its interval is within the precision (:mod:`envs.racing`);
        without it, as for baselines and re-measurements, at least ``repeats``
        blocks and more until the precision or its cap (:func:`envs.timing.time_runs`).

        Returns:
            On success: median latency, relative IQR spread, the block samples,
            and ``info`` with ``path`` (``single``, ``hetero`` or ``pipeline``),
            ``stages``, ``devices_used``, ``compile_s``, ``cpu_per_wall``
            (process CPU time / wall time while timing: about the busy
            threads), ``hetero_error`` when auto mode fell back,
            ``max_abs_error`` / ``max_rel_error`` / ``tolerance`` when outputs
            were validated, ``warning`` when more threads were busy than
            the devices allow, ``compiled_stages`` / ``cached_stages`` (stages
            or single-device models compiled now / taken from the cache),
            ``raced`` (``stopped``, ``settled`` or ``extended``) and ``race_best_s`` when raced,
            ``precision`` (:func:`envs.timing.precision_info`) when the precision rule ended it.
            On failure: ``ok=False`` with ``stage`` (``validate``, ``compile``,
            ``infer``, ``memory``, ``timeout``) and a one-sentence ``error``.
        """
        problem = self._check_affinity(affinity)
        if problem:
            return Measurement.failure(self.name, "validate", problem)
        used = [d for d in self.devices if d in set(affinity.values())]
        info: dict[str, object] = {
            "mode": self.mode,
            "stages": len(plan_stages(self.model, affinity)),
            "devices_used": used,
        }
        start = time.perf_counter()
        deadline = start + self.timing.timeout_s
        try:
            runner = self._prepare(affinity, used, deadline, info)
            if self.timing.validate_outputs:
                self._validate(runner, used, info)
            best = self._race_best if race else None
            limit = self._thread_limit(used)
            samples = time_runs(runner, self.timing, limit, deadline, info, best)
        except StageFailure as failure:
            info["measure_s"] = time.perf_counter() - start
            return Measurement.failure(self.name, failure.stage, failure.message, **info)
        timed_problem = _oversubscribed(float(info.get("cpu_per_wall", 0.0)), limit, " while timed")
        if self.mode == "auto" and info.get("path") == "hetero" and timed_problem:
            # the probe before timing missed it (other processes held the cores then):
            # refuse HETERO on these devices and measure again with the pipeline
            self._hetero_refused[frozenset(used)] = timed_problem
            return self.measure_ops(affinity, race)
        latency, spread = summarize_times(samples)
        if race and info.get("raced") != "stopped":
            self._race_best = latency if self._race_best is None else min(self._race_best, latency)
        info["measure_s"] = time.perf_counter() - start
        return Measurement(
            ok=True, latency_s=latency, spread=spread, runs=len(samples) * self.timing.block,
            backend=self.name, samples_s=samples, info=info,
        )

    def profile_ops(self, device: str, runs: int = 5) -> dict[str, float]:
        """Per-op execution time of the whole model compiled on one device.

        Compiles with ``enable_profiling``, runs once untimed and ``runs`` times,
        and takes each runtime node's median ``real_time``. Runtime nodes map to
        original ops through their ``originalLayersNames``: a fused node's time
        goes to its *main* op (the one the node is named after, else the first
        listed) and the other fused ops get 0; a plugin-inserted node with no
        original op (Reorder, precision Convert) adds its time to the main op
        of the node consuming its output (else producing its input). Ops that
        the plugin removed (constant-folded) get 0.

        Returns:
            Friendly name of every op of the model -> seconds (>= 0).

        Raises:
            ValueError: for a device not in this backend's valid devices, or if
                OpenVINO cannot compile/run the model there.
        """
        if device not in self.device_set.specs:
            raise ValueError(f"cannot profile on {device!r}: not a valid device of this backend "
                             f"({', '.join(self.device_set.specs)})")
        try:
            compiled = self.device_set.core.compile_model(
                self.model, device, {ov.properties.enable_profiling(): True})
            runner = RequestRunner(compiled, self._input_tensors())
            runner.infer()
            per_node: dict[str, list[float]] = {}
            for _ in range(runs):
                runner.infer()
                for entry in runner.request.get_profiling_info():
                    per_node.setdefault(entry.node_name, []).append(entry.real_time.total_seconds())
        except StageFailure as failure:
            raise ValueError(f"profiling on {device} failed: {failure.message}") from failure
        except OV_ERRORS as exc:
            raise ValueError(f"profiling on {device} failed: {openvino_error_text(exc)}") from exc
        node_time = {node: float(np.median(times)) for node, times in per_node.items()}
        return attribute_node_times(compiled.get_runtime_model(), node_time, self._op_names)

    # ------------------------------------------------------------------ steps

    def _check_affinity(self, affinity: Mapping[str, str]) -> Optional[str]:
        """A sentence saying why ``affinity`` cannot be measured, or None."""
        if self.device_set.errors:
            return " ".join(self.device_set.errors)
        missing = [n for n in self._op_names if n not in affinity]
        if missing:
            return (f"affinity misses {len(missing)} of the model's {len(self._op_names)} ops "
                    f"(e.g. {missing[:3]}); give every op, Parameters/Constants/Results included "
                    "(complete_affinity fills those)")
        if len(affinity) > len(self._op_names):
            known = set(self._op_names)
            extra = [n for n in affinity if n not in known]
            return f"affinity names {len(extra)} ops that are not in the model (e.g. {extra[:3]})"
        unknown = sorted(set(affinity.values()) - set(self.device_set.specs))
        if unknown:
            return (f"affinity uses unknown device(s) {unknown}; this backend has "
                    f"{', '.join(self.device_set.specs)} ({self.device_set.known_devices()})")
        return None

    def _input_tensors(self) -> list[ov.Tensor]:
        return [ov.Tensor(array, shared_memory=True) for array in self._inputs]

    def _prepare(self, affinity: Mapping[str, str], used: list[str], deadline: float,
                 info: dict[str, object]) -> Runner:
        """Compile the placement, create requests and run it once; pick the path by mode."""
        if self.mode == "pipeline":
            return self.compiler.pipeline(affinity, deadline, info)
        if self.mode == "hetero" or len(used) == 1:
            return self._prepare_hetero(affinity, used, deadline, info)
        refused = self._hetero_refused.get(frozenset(used))
        if refused:  # a property of the devices, not of the placement: do not try again
            info["hetero_error"] = refused + " (seen on an earlier placement on these devices)"
            return self.compiler.pipeline(affinity, deadline, info)
        try:
            runner = self._prepare_hetero(affinity, used, deadline, info)
            problem = self._thread_problem(runner, used)
        except StageFailure as failure:
            if failure.stage == "timeout":
                raise
            info["hetero_error"] = failure.message
            return self.compiler.pipeline(affinity, deadline, info)
        if problem:
            self._hetero_refused[frozenset(used)] = problem
            info["hetero_error"] = problem
            return self.compiler.pipeline(affinity, deadline, info)
        return runner

    def _thread_limit(self, used: Sequence[str]) -> int:
        """Most threads one inference may keep busy (devices run one after another); 0 = no limit."""
        threads = [self.device_set.info(d).threads for d in used]
        return 0 if 0 in threads else max(threads)

    def _thread_problem(self, runner: Runner, used: Sequence[str]) -> Optional[str]:
        """A sentence when a few runs keep more threads busy than the devices are configured for.

        HETERO with two instances of the CPU plugin was seen to run its
        sub-models on all cores whatever INFERENCE_NUM_THREADS says, which makes
        split placements look faster than single-device ones.
        """
        limit = self._thread_limit(used)
        return _oversubscribed(busy_threads(runner, THREAD_PROBE_RUNS), limit) if limit else None

    def _prepare_hetero(self, affinity: Mapping[str, str], used: list[str], deadline: float,
                        info: dict[str, object]) -> RequestRunner:
        """Whole model on one device (cached), or HETERO with every op's affinity set (on a clone)."""
        if len(used) == 1:
            info["path"] = "single"
            return self.compiler.single(used[0], deadline, info)
        info["path"] = "hetero"
        work = self.model.clone()
        for op in work.get_ordered_ops():
            op.get_rt_info()["affinity"] = affinity[op.get_friendly_name()]
        compiled = self.compiler.compile(work, "HETERO:" + ",".join(used), deadline, info)
        runner = RequestRunner(compiled, self._input_tensors())
        runner.infer()
        return runner

    def _reference_outputs(self) -> list[np.ndarray]:
        """Outputs of the unsplit model on the first device at f32 (computed once)."""
        if self._reference is None:
            device = next(iter(self.device_set.specs))
            with ov_errors("infer", f"cannot compute reference outputs on {device}"):
                compiled = self.device_set.core.compile_model(
                    self.model, device, {ov.properties.hint.inference_precision(): ov.Type.f32})
            runner = RequestRunner(compiled, self._input_tensors())
            runner.infer()
            self._reference = runner.outputs()
        return self._reference

    def _validate(self, runner: Runner, used: list[str], info: dict[str, object]) -> None:
        """Compare the last inference's outputs with the unsplit f32 model's."""
        precisions = {self.device_set.info(d).precision for d in used}
        tolerance = max(TOLERANCE.get(p, max(TOLERANCE.values())) for p in precisions)
        max_abs = max_rel = 0.0
        for out, ref in zip(runner.outputs(), self._reference_outputs()):
            if ref.dtype.kind == "f":
                err = float(np.max(np.abs(out.astype(np.float64) - ref))) if ref.size else 0.0
                rel = err / max(float(np.max(np.abs(ref))) if ref.size else 0.0, 1e-12)
            else:
                err = float(np.count_nonzero(out != ref))
                rel = np.inf if err else 0.0
            max_abs, max_rel = max(max_abs, err), max(max_rel, rel)
        info.update(max_abs_error=max_abs, max_rel_error=max_rel, tolerance=tolerance)
        if max_rel > tolerance:
            raise StageFailure(
                "infer",
                f"outputs differ from the unsplit model's: max abs error {max_abs:.3g} "
                f"(relative {max_rel:.3g}) exceeds the tolerance {tolerance:g} "
                f"for precisions {sorted(precisions)}",
            )
