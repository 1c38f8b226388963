"""OpenVINO's automatic baselines: the whole model on OpenVINO's AUTO device over the run's
real devices (:func:`measure_auto`), and on HETERO over the run's devices with OpenVINO
splitting it by itself (:func:`measure_hetero_mode`: ``hetero_auto``, HETERO's default
per-op fallback in device-priority order; ``hetero_pipeline``, HETERO's
``MODEL_DISTRIBUTION_POLICY=PIPELINE_PARALLEL``, which splits by memory)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Sequence, Union

import openvino as ov

from envs.base import Measurement, TimingConfig, summarize_times
from envs.openvino.devices import RESERVED_NAMES, DeviceSet, DeviceSpec
from envs.openvino.runners import RequestRunner, StageFailure, ov_errors, random_inputs, time_runs, timeout_text

__all__ = ['AUTO_BACKEND', 'HETERO_MODES', 'auto_candidates', 'measure_auto', 'measure_hetero_mode']

# --------------------------------------------------------------------------- OpenVINO AUTO

AUTO_BACKEND = "openvino-auto-device"
"""The ``backend`` of measurements made by :func:`measure_auto`."""


def auto_candidates(devices: Sequence[str], available: Sequence[str],
                    device_type: Callable[[str], str] = lambda device: "") -> tuple[list[str], list[str]]:
    """The real devices behind ``devices``, in the priority order AUTO would use by default.

    Virtual devices map to their base (``CPU_F32`` and ``CPU2=CPU:...`` -> ``CPU``);
    each real device appears once. AUTO takes its candidate list as a priority
    list, so the candidates are ordered as AUTO ranks devices when it picks by
    itself: GPUs (discrete before integrated), then the CPU, then anything else
    (NPU...), keeping the given order among equals.

    Args:
        devices: device specs of the run (module doc); empty means ``["CPU"]``.
        available: ``openvino.Core().available_devices``.
        device_type: a device's DEVICE_TYPE as text (``"Type.DISCRETE"``...),
            ``""`` when unknown (then a GPU counts as integrated).

    Returns:
        ``(candidates, problems)``: the real device names, and one sentence per
        spec that cannot be used (unparsable, a meta device, or no such device here).
    """
    bases: list[str] = []
    problems: list[str] = []
    for text in devices or ["CPU"]:
        try:
            base = DeviceSpec.parse(text).base
        except ValueError as exc:
            problems.append(str(exc))
            continue
        if base.upper() in RESERVED_NAMES:
            problems.append(f"{base} is an OpenVINO meta device, not a real device; "
                            "name the real devices (e.g. CPU,GPU)")
        elif not (base in available or any(d.split(".")[0] == base for d in available)):
            problems.append(f"unknown device {base!r} (real devices here: {', '.join(available) or 'none'})")
        elif base not in bases:
            bases.append(base)

    def rank(device: str) -> int:
        family = device.split(".")[0]
        if family == "GPU":
            return 0 if "DISCRETE" in (device_type(device) or "").upper() else 1
        return 2 if family == "CPU" else 3

    return sorted(bases, key=rank), problems


def _device_type(core: ov.Core, device: str) -> str:
    """DEVICE_TYPE of ``device`` as text, ``""`` when the plugin does not say."""
    try:
        return str(core.get_property(device, "DEVICE_TYPE"))
    except RuntimeError:  # the property is optional
        return ""


def measure_auto(model: Union[ov.Model, str, Path], devices: Sequence[str],
                 timing: TimingConfig = TimingConfig(), seed: int = 0) -> Measurement:
    """Time the whole model compiled on OpenVINO's AUTO device over the run's real devices.

    The trivial baseline "let OpenVINO choose one device": the real devices
    behind ``devices`` (virtual CPU devices count as ``CPU``) become AUTO's
    candidates (:func:`auto_candidates`), e.g. ``AUTO:CPU`` for ``CPU,CPU_F32``
    and ``AUTO:GPU,CPU`` for ``CPU,GPU``. The model is compiled in a Core of
    its own with the LATENCY hint, each candidate at its plugin defaults
    (inference precision included) except ``timing.threads``, and with AUTO's
    startup fallback off, so AUTO waits for the device it selected instead of
    running the first inferences on the CPU and the timed runs are all on that
    device. Timing is that of :meth:`OpenVINOBackend.measure_ops` (warm-up,
    median of blocks, time budget); outputs are not validated (the model is
    not split).

    Args:
        model: an ``openvino.Model`` with static input shapes, or a zoo name /
            ``.xml`` / ``.onnx`` path for :func:`hsdag_core.models.load_model`.
        devices: the run's device specs (module doc).
        timing: warm-up, repeats, block, time budget and threads per device.
        seed: seed of the random input data.

    Returns:
        A :class:`~envs.base.Measurement` with ``backend`` ``openvino-auto-device``;
        ``info`` has ``auto_device`` (e.g. ``AUTO:CPU``), ``candidates``,
        ``execution_devices`` (the device(s) AUTO ran on, from the compiled
        model's EXECUTION_DEVICES; None if OpenVINO does not say), ``path``
        (``auto``), ``compile_s``, ``cpu_per_wall``, ``measure_s``. Never
        raises: bad devices or a bad model give ``stage="validate"``, OpenVINO
        errors ``compile``/``infer``, an exhausted budget ``timeout``.
    """
    start = time.perf_counter()
    deadline = start + timing.timeout_s
    info: dict[str, object] = {"path": "auto"}
    if not isinstance(model, ov.Model):
        from hsdag_core.models import load_model

        try:
            model = load_model(str(model))
        except ValueError as exc:  # GraphError: one sentence
            return Measurement.failure(AUTO_BACKEND, "validate", str(exc), **info)
    core = ov.Core()
    candidates, problems = auto_candidates(devices, list(core.available_devices),
                                           lambda device: _device_type(core, device))
    if not candidates and not problems:
        problems.append("no devices given for AUTO to choose from")
    if problems:
        return Measurement.failure(AUTO_BACKEND, "validate", "; ".join(problems), **info)
    auto_device = "AUTO:" + ",".join(candidates)
    info.update(auto_device=auto_device, candidates=list(candidates))
    try:
        inputs = [ov.Tensor(array, shared_memory=True) for array in random_inputs(model, seed)]
    except ValueError as exc:
        return Measurement.failure(AUTO_BACKEND, "validate", str(exc), **info)
    config: dict[str, object] = {
        ov.properties.hint.performance_mode(): ov.properties.hint.PerformanceMode.LATENCY,
        "ENABLE_STARTUP_FALLBACK": False,
    }
    if timing.threads:
        config[ov.properties.device.properties()] = {
            d: {ov.properties.inference_num_threads(): timing.threads}
            for d in candidates if d.split(".")[0] == "CPU"}
    try:
        compile_start = time.perf_counter()
        try:
            with ov_errors("compile", f"compiling on {auto_device} failed"):
                compiled = core.compile_model(model, auto_device, config)
        finally:
            info["compile_s"] = time.perf_counter() - compile_start
        if time.perf_counter() > deadline:
            raise StageFailure("timeout", timeout_text(timing, info, runs=0))
        runner = RequestRunner(compiled, inputs)
        runner.infer()
        limit = timing.threads if all(d.split(".")[0] == "CPU" for d in candidates) else 0
        samples = time_runs(runner, timing, limit, deadline, info)
    except StageFailure as failure:
        info["measure_s"] = time.perf_counter() - start
        return Measurement.failure(AUTO_BACKEND, failure.stage, failure.message, **info)
    return _timed(compiled, samples, timing, start, AUTO_BACKEND, info)


# --------------------------------------------------------------------------- HETERO's own split

HETERO_MODES: dict[str, str] = {
    "hetero_auto": "HETERO's default split (each op on the first device that supports it)",
    "hetero_pipeline": "HETERO with MODEL_DISTRIBUTION_POLICY=PIPELINE_PARALLEL (split by memory)",
}
"""OpenVINO's automatic split modes: name (a baseline's and a candidate's) -> what it is."""


def measure_hetero_mode(model: Union[ov.Model, str, Path], devices: Sequence[str], mode: str,
                        timing: TimingConfig = TimingConfig(), seed: int = 0) -> Measurement:
    """Time the whole model compiled on ``HETERO:<devices>`` with no affinity set, so
    OpenVINO splits it by itself.

    ``hetero_auto`` is HETERO's default: every op goes to the first device, in the order
    the run gives its devices (their priority), that supports it. ``hetero_pipeline``
    adds ``MODEL_DISTRIBUTION_POLICY=PIPELINE_PARALLEL``
    (``openvino.properties.hint.model_distribution_policy`` with
    ``ModelDistributionPolicy.PIPELINE_PARALLEL``): HETERO splits the model into stages
    by the devices' available memory. Devices are registered and configured as the run's
    backend does (:class:`~envs.openvino.devices.DeviceSet`: virtual devices such as
    ``CPU_F32`` are second plugin instances), with the LATENCY hint; timing is that of
    :func:`measure_auto`; outputs are not validated.

    Returns:
        A :class:`~envs.base.Measurement` with ``backend`` ``openvino-hetero-auto`` or
        ``openvino-hetero-pipeline``; ``info`` has ``hetero_device`` (e.g.
        ``HETERO:CPU,CPU_F32``), ``mode``, ``execution_devices`` (the devices OpenVINO
        ran sub-models on; None if it does not say), ``compile_s``, ``measure_s``. Never
        raises: a mode that cannot run on these devices is a failed measurement whose
        ``error`` says why (bad devices ``validate``, OpenVINO errors ``compile`` or
        ``infer``, an exhausted budget ``timeout``).
    """
    if mode not in HETERO_MODES:
        raise ValueError(f"unknown HETERO mode {mode!r}; use {' or '.join(HETERO_MODES)}")
    backend = "openvino-" + mode.replace("_", "-")
    start = time.perf_counter()
    deadline = start + timing.timeout_s
    info: dict[str, object] = {"path": mode, "mode": mode}
    if not isinstance(model, ov.Model):
        from hsdag_core.models import load_model

        try:
            model = load_model(str(model))
        except ValueError as exc:  # GraphError: one sentence
            return Measurement.failure(backend, "validate", str(exc), **info)
    device_set = DeviceSet(list(devices), default_threads=timing.threads)
    if device_set.errors:
        return Measurement.failure(backend, "validate", "; ".join(device_set.errors), **info)
    hetero_device = "HETERO:" + ",".join(device_set.names)
    info["hetero_device"] = hetero_device
    try:
        inputs = [ov.Tensor(array, shared_memory=True) for array in random_inputs(model, seed)]
    except ValueError as exc:
        return Measurement.failure(backend, "validate", str(exc), **info)
    hint = ov.properties.hint
    config: dict[str, object] = {hint.performance_mode(): hint.PerformanceMode.LATENCY}
    if mode == "hetero_pipeline":
        config[hint.model_distribution_policy()] = {hint.ModelDistributionPolicy.PIPELINE_PARALLEL}
    try:
        compile_start = time.perf_counter()
        try:
            with ov_errors("compile", f"compiling on {hetero_device} ({mode}) failed"):
                compiled = device_set.core.compile_model(model, hetero_device, config)
        finally:
            info["compile_s"] = time.perf_counter() - compile_start
        if time.perf_counter() > deadline:
            raise StageFailure("timeout", timeout_text(timing, info, runs=0))
        runner = RequestRunner(compiled, inputs)
        runner.infer()
        bases = {device_set.specs[n].base.split(".")[0] for n in device_set.names}
        limit = timing.threads if bases == {"CPU"} and len(device_set.names) == 1 else 0
        samples = time_runs(runner, timing, limit, deadline, info)
    except StageFailure as failure:
        info["measure_s"] = time.perf_counter() - start
        return Measurement.failure(backend, failure.stage, failure.message, **info)
    return _timed(compiled, samples, timing, start, backend, info)


def _timed(compiled, samples: list, timing: TimingConfig, start: float, backend: str,
           info: dict) -> Measurement:
    """The measurement of a whole model compiled by OpenVINO's own placement (AUTO or a
    HETERO mode): its timed samples, and the devices it ran on where OpenVINO says."""
    try:
        info["execution_devices"] = [str(d) for d in compiled.get_property("EXECUTION_DEVICES")]
    except RuntimeError:  # the property is optional
        info["execution_devices"] = None
    latency, spread = summarize_times(samples)
    info["measure_s"] = time.perf_counter() - start
    return Measurement(
        ok=True, latency_s=latency, spread=spread, runs=len(samples) * timing.block,
        backend=backend, samples_s=samples, info=info,
    )
