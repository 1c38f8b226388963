"""Real OpenVINO measurement backends, at the level of OpenVINO ops.

Devices
-------
A device spec names a real OpenVINO device or a *virtual* one: another
instance of a real device's plugin registered in the same ``openvino.Core``
under another name, with its own properties. On a CPU-only machine this gives
two devices that really differ (e.g. bf16 vs f32 kernels) but run on the same
hardware, and :meth:`DeviceSet.describe` says so. Spec syntax (no spaces)::

    CPU                         the real device, plugin defaults
    CPU:precision=f32           the real device, configured
    CPU_F32                     alias of CPU_F32=CPU:precision=f32 (also CPU_BF16, CPU_F16)
    CPU_FAST=CPU:precision=bf16:threads=2
                                a virtual device CPU_FAST: a second CPU plugin instance

A virtual device's name must contain its real device's name (an OpenVINO
rule: ``CPU2`` and ``CPU_FAST`` work, ``FAST`` does not).

Properties: ``precision`` (``f32``, ``bf16``, ``f16``; must be among the
device's OPTIMIZATION_CAPABILITIES) and ``threads`` (INFERENCE_NUM_THREADS,
``0`` = plugin default). Properties are separated by ``:`` so a spec never
contains a comma and lists of specs can be comma-separated on a command line.

Measuring
---------
:class:`OpenVINOBackend` measures a placement given as an *affinity*: the
friendly name of every op of the model (Parameters, Constants and Results
included) mapped to a device name. It runs it with HETERO (``mode="hetero"``),
with its own stage pipeline (``mode="pipeline"``: the model cut into stages
that are contiguous in ``get_ordered_ops()`` order, each compiled on its
device, tensors handed from stage to stage), or HETERO with the pipeline as
fallback (``mode="auto"``). :func:`measure_auto` times the trivial baseline
where OpenVINO's AUTO device picks one of the run's real devices for the whole
model. Whatever fails becomes a :class:`~envs.base.Measurement` failure,
never an exception.

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
  also leaves HETERO when it keeps more threads busy than allowed, and every
  timing reports ``cpu_per_wall``.
* A plugin crash (segfault) during compile cannot be caught in-process; run
  measurements of untrusted models in a separate process.
"""
from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal, Mapping, NamedTuple, Optional, Sequence, Union

import numpy as np
import openvino as ov
from openvino import opset13

from envs.base import Measurement, TimingConfig, summarize_times
from hsdag_ray.core.models import openvino_error_text

__all__ = [
    "AUTO_BACKEND",
    "DEVICE_ALIASES",
    "PRECISIONS",
    "STRUCTURAL_OPS",
    "DeviceInfo",
    "DeviceSet",
    "DeviceSpec",
    "OpenVINOBackend",
    "Stage",
    "StagePlan",
    "auto_candidates",
    "check_devices",
    "complete_affinity",
    "find_plugin_library",
    "measure_auto",
    "plan_stages",
    "split_stages",
]

Mode = Literal["hetero", "pipeline", "auto"]
TensorKey = tuple[str, int]
"""A tensor of the original model: (producer's friendly name, output index)."""

PRECISIONS: dict[str, tuple[ov.Type, str]] = {
    "f32": (ov.Type.f32, "FP32"),
    "bf16": (ov.Type.bf16, "BF16"),
    "f16": (ov.Type.f16, "FP16"),
}
"""Precision name -> (OpenVINO type, the OPTIMIZATION_CAPABILITIES entry it needs)."""

DEVICE_ALIASES: dict[str, str] = {
    "CPU_F32": "CPU_F32=CPU:precision=f32",
    "CPU_BF16": "CPU_BF16=CPU:precision=bf16",
    "CPU_F16": "CPU_F16=CPU:precision=f16",
}
"""Ready-made virtual devices: alias -> full spec."""

STRUCTURAL_OPS = frozenset({"Parameter", "Constant", "Result"})
"""Op types that compute nothing; the pipeline places them with their users."""

_RESERVED_NAMES = frozenset({"HETERO", "AUTO", "MULTI", "BATCH", "PROXY"})
_VIRTUAL_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
# Relative output error (max abs error / max abs reference output) allowed by
# validate_outputs, by the least precise inference precision among the devices
# used; on small conv nets f32 splits agree exactly and bf16 runs differ from
# f32 by about 2e-3.
_TOLERANCE = {"f32": 1e-4, "f16": 1e-2, "bf16": 5e-2}
# Busy threads (CPU time / wall time) above limit * this mean a thread limit was ignored.
_OVERSUBSCRIPTION = 1.15
_THREAD_PROBE_RUNS = 3


# --------------------------------------------------------------------------- devices


@dataclass(frozen=True)
class DeviceSpec:
    """A parsed device spec: a name, the real device that runs it, its settings.

    Attributes:
        name: the name placements use (``CPU``, ``CPU_F32``, ``CPU2``).
        base: the real OpenVINO device whose plugin runs it.
        precision: inference precision (``f32``/``bf16``/``f16``), None = default.
        threads: INFERENCE_NUM_THREADS, None = the backend's default.
    """

    name: str
    base: str
    precision: Optional[str] = None
    threads: Optional[int] = None

    @property
    def virtual(self) -> bool:
        """True when this is another plugin instance of ``base``, not ``base`` itself."""
        return self.name != self.base

    @classmethod
    def parse(cls, text: str) -> "DeviceSpec":
        """Parse ``NAME``, ``BASE:k=v[:k=v]`` or ``NAME=BASE[:k=v...]`` (see module doc).

        Raises:
            ValueError: malformed spec or unknown property, with the valid forms.
        """
        text = text.strip()
        text = DEVICE_ALIASES.get(text, text)
        head, _, tail = text.partition(":")
        name, has_name, base = head.partition("=")
        if not has_name:
            base = name
        props = tail.split(":") if tail else []
        if not name or not base:
            raise ValueError(f"device spec {text!r} is empty on one side; "
                             "write e.g. CPU or CPU2=CPU:precision=f32")
        precision: Optional[str] = None
        threads: Optional[int] = None
        for prop in props:
            key, _, value = prop.partition("=")
            if key == "precision" and value in PRECISIONS:
                precision = value
            elif key == "threads" and value.isdigit():
                threads = int(value)
            else:
                raise ValueError(
                    f"bad property {prop!r} in device spec {text!r}; "
                    f"use precision={'|'.join(PRECISIONS)} or threads=N (N >= 0)"
                )
        return cls(name=name, base=base, precision=precision, threads=threads)


@dataclass(frozen=True)
class DeviceInfo:
    """What a configured device effectively is, read back from OpenVINO.

    Attributes:
        name: the device name placements use.
        base: the real device (hardware) behind it.
        virtual: True for a second plugin instance of ``base``.
        precision: effective inference precision (e.g. ``bf16``).
        threads: effective INFERENCE_NUM_THREADS (0 = plugin decides).
        hardware: FULL_DEVICE_NAME of the base device.
    """

    name: str
    base: str
    virtual: bool
    precision: str
    threads: int
    hardware: str

    def describe(self) -> str:
        """One plain sentence saying what this device is."""
        threads = f"{self.threads} threads" if self.threads else "default threads"
        if self.virtual:
            kind = (f"virtual device: a second instance of the {self.base} plugin on the same "
                    f"hardware as {self.base} ({self.hardware})")
        else:
            kind = f"real device ({self.hardware})"
        return f"{self.name}: {kind}, inference precision {self.precision}, {threads}."


def find_plugin_library(core: ov.Core, base: str) -> Path:
    """Path of the shared library of the plugin that runs the real device ``base``.

    The library name comes from OpenVINO itself (``core.get_versions``) and is
    looked up in the installed ``openvino`` package, so nothing is machine-specific.

    Raises:
        ValueError: when the library cannot be found.
    """
    library = core.get_versions(base)[base].description  # e.g. "openvino_intel_cpu_plugin"
    package = Path(ov.__file__).resolve().parent
    names = (f"lib{library}.so", f"{library}.dll", f"lib{library}.dylib")
    for folder in (package / "libs", package):
        for file_name in names:
            if (folder / file_name).is_file():
                return folder / file_name
    raise ValueError(
        f"cannot find the plugin library {library!r} of {base} under {package}; "
        "reinstall the openvino wheel or use the real device only"
    )


class DeviceSet:
    """The devices a user named, registered and configured in one ``openvino.Core``.

    Never raises for a bad spec: problems are collected in :attr:`errors`
    (one sentence each) so a backend can turn them into failed measurements;
    :func:`check_devices` raises them for command-line use.

    Attributes:
        core: the Core every compile of the owner must use.
        names: the device names, in the order given (raw text for unparsable specs).
        specs: name -> parsed spec, for the valid devices.
        errors: one sentence per invalid spec.
    """

    def __init__(self, specs: Sequence[str], default_threads: int = 0) -> None:
        """Register and configure ``specs`` in a new Core.

        Args:
            specs: device specs (module doc); an empty list means ``["CPU"]``.
            default_threads: INFERENCE_NUM_THREADS for devices whose spec does
                not set ``threads`` (0 = leave the plugin default).
        """
        self.core = ov.Core()
        self.names: list[str] = []
        self.specs: dict[str, DeviceSpec] = {}
        self.errors: list[str] = []
        self._real = list(self.core.available_devices)
        for text in specs or ["CPU"]:
            try:
                spec = DeviceSpec.parse(text)
            except ValueError as exc:
                self.names.append(text)
                self.errors.append(str(exc))
                continue
            self.names.append(spec.name)
            problem = self._add(spec, default_threads)
            if problem:
                self.errors.append(problem)

    def known_devices(self) -> str:
        """A sentence listing the device names that can be used here."""
        aliases = [a for a, spec in DEVICE_ALIASES.items() if self._is_real(DeviceSpec.parse(spec).base)]
        text = f"real devices here: {', '.join(self._real) or 'none'}"
        if aliases:
            text += f"; ready virtual devices: {', '.join(aliases)}"
        return text + "; or define one as e.g. CPU2=CPU:precision=f32|bf16|f16:threads=N"

    def _is_real(self, name: str) -> bool:
        return name in self._real or any(d.split(".")[0] == name for d in self._real)

    def _add(self, spec: DeviceSpec, default_threads: int) -> Optional[str]:
        """Register/configure one device; return a sentence on failure, else None."""
        if not self._is_real(spec.base):
            return f"unknown device {spec.base!r}; {self.known_devices()}"
        if spec.name in self.specs:
            return f"device {spec.name!r} is named twice; give each device its own name"
        if spec.virtual:
            if (not _VIRTUAL_NAME.match(spec.name) or spec.base not in spec.name
                    or spec.name.upper() in _RESERVED_NAMES or self._is_real(spec.name)):
                return (f"cannot name a virtual device {spec.name!r}: use letters, digits and '_', "
                        f"include the real device's name {spec.base!r} (OpenVINO requires it, e.g. "
                        f"{spec.base}2 or FAST_{spec.base}) and do not reuse a real device's name")
            try:
                self.core.register_plugin(str(find_plugin_library(self.core, spec.base)), spec.name)
                self.core.get_property(spec.name, "FULL_DEVICE_NAME")  # loads the plugin now
            except (ValueError, RuntimeError) as exc:
                return f"cannot create virtual device {spec.name!r}: {openvino_error_text(exc)}"
        props: dict[str, object] = {}
        if spec.precision is not None:
            ov_type, capability = PRECISIONS[spec.precision]
            capabilities = list(self.core.get_property(spec.base, "OPTIMIZATION_CAPABILITIES"))
            if capability not in capabilities:
                return (f"device {spec.name!r}: {spec.base} does not support precision {spec.precision} "
                        f"here (capabilities: {', '.join(capabilities)})")
            props[ov.properties.hint.inference_precision()] = ov_type
        threads = spec.threads if spec.threads is not None else default_threads
        if threads:
            props[ov.properties.inference_num_threads()] = threads
        try:
            if props:
                self.core.set_property(spec.name, props)
        except RuntimeError as exc:
            return f"cannot configure device {spec.name!r}: {openvino_error_text(exc)}"
        self.specs[spec.name] = spec
        return None

    def info(self, name: str) -> DeviceInfo:
        """Effective settings of the valid device ``name`` (KeyError if unknown)."""
        spec = self.specs[name]
        try:
            precision = self.core.get_property(name, ov.properties.hint.inference_precision()).get_type_name()
        except RuntimeError:
            precision = "default"
        try:
            threads = int(self.core.get_property(name, ov.properties.inference_num_threads()))
        except RuntimeError:
            threads = 0
        hardware = str(self.core.get_property(spec.base, "FULL_DEVICE_NAME"))
        return DeviceInfo(name, spec.base, spec.virtual, precision, threads, hardware)

    def describe(self) -> list[str]:
        """One sentence per device (valid ones), saying real or virtual and its settings."""
        return [self.info(name).describe() for name in self.specs]


def check_devices(specs: Sequence[str], default_threads: int = 0) -> list[DeviceInfo]:
    """Validate device specs for a command line; return what each device is.

    Raises:
        ValueError: naming every bad spec and the devices that exist here.
    """
    devices = DeviceSet(specs, default_threads)
    if devices.errors:
        raise ValueError("; ".join(devices.errors))
    return [devices.info(name) for name in devices.specs]


# --------------------------------------------------------------------------- stages


class StagePlan(NamedTuple):
    """One stage of a placement: a device and its compute ops, in model order."""

    device: str
    ops: list[str]


@dataclass
class Stage:
    """One stage of the pipeline, built as its own model.

    Attributes:
        device: where it runs.
        model: the stage's ``ov.Model``; its parameters and results are in the
            order of ``inputs`` and ``outputs``.
        inputs: original tensors fed to the stage's parameters.
        outputs: original tensors the stage's results produce (those used by a
            later stage or a model output).
        ops: friendly names of its compute ops.
    """

    device: str
    model: ov.Model
    inputs: list[TensorKey]
    outputs: list[TensorKey]
    ops: list[str]


def plan_stages(model: ov.Model, affinity: Mapping[str, str]) -> list[StagePlan]:
    """Cut the compute ops (all but Parameter/Constant/Result) into stages.

    Walks ``model.get_ordered_ops()`` and starts a new stage wherever the
    device of a compute op differs from the previous compute op's.

    Returns:
        The stages in execution order (empty for a model without compute ops).
    """
    plans: list[StagePlan] = []
    for op in model.get_ordered_ops():
        if op.get_type_name() in STRUCTURAL_OPS:
            continue
        name = op.get_friendly_name()
        device = affinity[name]
        if not plans or plans[-1].device != device:
            plans.append(StagePlan(device, []))
        plans[-1].ops.append(name)
    return plans


def split_stages(model: ov.Model, affinity: Mapping[str, str]) -> tuple[list[Stage], list[TensorKey]]:
    """Split ``model`` into stage models following :func:`plan_stages`.

    Works on a clone (``model`` is not changed). Each stage gets a new
    ``opset13.parameter`` for every tensor entering from an earlier stage or a
    model input, and an ``opset13.result`` for every tensor a later stage or a
    model output uses. Constants stay with each consumer, so a constant used by
    several stages appears in each of them. Friendly names must be unique.

    Raises:
        ValueError: for a stateful model (its Assign sinks have no outputs to pass on).

    Returns:
        The stages, and the tensor behind each model output, in output order.
    """
    if model.get_sinks():
        raise ValueError("stateful models (ReadValue/Assign) cannot be split into stages")
    plans = plan_stages(model, affinity)
    stage_of = {name: s for s, plan in enumerate(plans) for name in plan.ops}
    work = model.clone()
    by_name = {op.get_friendly_name(): op for op in work.get_ordered_ops()}
    params: list[dict[TensorKey, ov.Node]] = [{} for _ in plans]
    needed: list[dict[TensorKey, ov.Output]] = [{} for _ in plans]
    for s, plan in enumerate(plans):
        for name in plan.ops:
            for inp in by_name[name].inputs():
                src = inp.get_source_output()
                producer = src.get_node()
                pname = producer.get_friendly_name()
                if producer.get_type_name() == "Constant" or stage_of.get(pname) == s:
                    continue
                key = (pname, src.get_index())
                if key not in params[s]:
                    params[s][key] = opset13.parameter(
                        src.get_partial_shape(), src.get_element_type(), name=f"{pname}:{key[1]}"
                    )
                    if pname in stage_of:
                        needed[stage_of[pname]][key] = src
                inp.replace_source_output(params[s][key].output(0))
    output_keys: list[TensorKey] = []
    for result in work.get_results():
        src = result.input_value(0)
        key = (src.get_node().get_friendly_name(), src.get_index())
        output_keys.append(key)
        if key[0] in stage_of:
            needed[stage_of[key[0]]][key] = src
    stages = []
    for s, plan in enumerate(plans):
        results = [opset13.result(out) for out in needed[s].values()]
        stage_model = ov.Model(results, list(params[s].values()), f"{model.get_friendly_name()}_stage{s}")
        stages.append(Stage(plan.device, stage_model, list(params[s]), list(needed[s]), plan.ops))
    return stages, output_keys


def complete_affinity(model: ov.Model, affinity: Mapping[str, str]) -> dict[str, str]:
    """Fill in the structural ops of a compute-op affinity.

    Constants and Parameters get the device of their first consumer (in
    ``get_ordered_ops()`` order) that has one,
    Results the device of their producer. Entries already given are kept;
    compute ops missing from ``affinity`` stay missing (and so does a source
    that only feeds Results).

    Returns:
        A new affinity dict.
    """
    full = dict(affinity)
    ops = model.get_ordered_ops()
    position = {op.get_friendly_name(): i for i, op in enumerate(ops)}
    for op in ops:
        name = op.get_friendly_name()
        if name in full or op.get_type_name() not in ("Constant", "Parameter"):
            continue
        consumers = sorted((i.get_node().get_friendly_name()
                            for out in op.outputs() for i in out.get_target_inputs()),
                           key=position.__getitem__)
        device = next((full[c] for c in consumers if c in full), None)
        if device is not None:
            full[name] = device
    for op in ops:  # after the sources, so a Result fed by a Parameter gets its device
        name = op.get_friendly_name()
        if op.get_type_name() != "Result" or name in full:
            continue
        producer = op.input_value(0).get_node().get_friendly_name()
        if producer in full:
            full[name] = full[producer]
    return full


# --------------------------------------------------------------------------- running


class _StageFailure(Exception):
    """A measurement step failed; carries the Measurement stage and sentence."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage
        self.message = message


class _RequestRunner:
    """A whole compiled model (one device or HETERO) and its infer request."""

    def __init__(self, compiled: ov.CompiledModel, inputs: Sequence[ov.Tensor]) -> None:
        self.request = compiled.create_infer_request()
        for i, tensor in enumerate(inputs):
            self.request.set_input_tensor(i, tensor)
        self._n_outputs = len(compiled.outputs)

    def infer(self) -> None:
        """Run one inference (raises _StageFailure('infer') on an OpenVINO error)."""
        try:
            self.request.infer()
        except Exception as exc:  # OpenVINO raises RuntimeError and others
            raise _StageFailure("infer", f"inference failed: {openvino_error_text(exc)}") from exc

    def outputs(self) -> list[np.ndarray]:
        """Copies of the model outputs of the last inference."""
        return [self.request.get_output_tensor(i).data.copy() for i in range(self._n_outputs)]


class _PipelineRunner:
    """Compiled stages run in order; tensors are handed over without copies."""

    def __init__(
        self,
        stages: Sequence[Stage],
        compiled: Sequence[ov.CompiledModel],
        sources: dict[TensorKey, ov.Tensor],
        output_keys: Sequence[TensorKey],
    ) -> None:
        self._steps = [(stage, c.create_infer_request()) for stage, c in zip(stages, compiled)]
        self._store = dict(sources)
        self._output_keys = list(output_keys)

    def infer(self) -> None:
        """Run every stage once, feeding each with the tensors of earlier stages."""
        store = self._store
        try:
            for stage, request in self._steps:
                for i, key in enumerate(stage.inputs):
                    request.set_input_tensor(i, store[key])
                request.infer()
                for j, key in enumerate(stage.outputs):
                    store[key] = request.get_output_tensor(j)
        except Exception as exc:  # OpenVINO raises RuntimeError and others
            raise _StageFailure("infer", f"stage pipeline inference failed: {openvino_error_text(exc)}") from exc

    def outputs(self) -> list[np.ndarray]:
        """Copies of the model outputs of the last inference."""
        return [self._store[key].data.copy() for key in self._output_keys]


_Runner = Union[_RequestRunner, _PipelineRunner]


def _random_inputs(model: ov.Model, seed: int) -> list[np.ndarray]:
    """Random data for every model input: N(0,1) floats, 0/1 for integers and booleans.

    0/1 keeps integer inputs valid as indices (token ids, token types), masks and flags.

    Raises:
        ValueError: for a dynamic input shape or an element type it cannot fill.
    """
    rng = np.random.default_rng(seed)
    arrays = []
    for port in model.inputs:
        shape, etype = port.get_partial_shape(), port.get_element_type()
        name = port.get_any_name() if port.get_names() else port.get_node().get_friendly_name()
        if shape.is_dynamic:
            raise ValueError(f"model input {name!r} has dynamic shape {shape}; "
                             "reshape the model to static shapes first")
        dims = tuple(shape.to_shape())
        if etype == ov.Type.boolean:
            arrays.append(rng.integers(0, 2, dims).astype(bool))
        elif etype.is_integral():
            arrays.append(rng.integers(0, 2, dims).astype(etype.to_dtype()))
        elif etype in (ov.Type.f32, ov.Type.f16, ov.Type.f64):
            arrays.append(rng.standard_normal(dims).astype(etype.to_dtype()))
        else:
            raise ValueError(f"model input {name!r} has element type {etype.get_type_name()}; "
                             "only f64/f32/f16, integer and boolean inputs can be filled with random data")
    return arrays


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
        self._inputs = _random_inputs(model, seed)
        self._reference: Optional[list[np.ndarray]] = None

    # ------------------------------------------------------------------ public

    def measure(self, placement: Mapping[str, str]) -> Measurement:
        """Same as :meth:`measure_ops` (the :class:`~envs.base.Backend` interface)."""
        return self.measure_ops(placement)

    def measure_ops(self, affinity: Mapping[str, str]) -> Measurement:
        """Compile and time the placement ``affinity`` (op friendly name -> device).

        Returns:
            On success: median latency, relative IQR spread, the block samples,
            and ``info`` with ``path`` (``single``, ``hetero`` or ``pipeline``),
            ``stages``, ``devices_used``, ``compile_s``, ``cpu_per_wall``
            (process CPU time / wall time while timing: about the busy
            threads), ``hetero_error`` when auto mode fell back,
            ``max_abs_error`` / ``max_rel_error`` / ``tolerance`` when outputs
            were validated, and ``warning`` when more threads were busy than
            the devices allow.
            On failure: ``ok=False`` with ``stage`` (``validate``, ``compile``,
            ``infer``, ``timeout``) and a one-sentence ``error``.
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
            samples = self._time(runner, used, deadline, info)
        except _StageFailure as failure:
            info["measure_s"] = time.perf_counter() - start
            return Measurement.failure(self.name, failure.stage, failure.message, **info)
        latency, spread = summarize_times(samples)
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
            runner = _RequestRunner(compiled, self._input_tensors())
            runner.infer()
            per_node: dict[str, list[float]] = {}
            for _ in range(runs):
                runner.infer()
                for entry in runner.request.get_profiling_info():
                    per_node.setdefault(entry.node_name, []).append(entry.real_time.total_seconds())
        except _StageFailure as failure:
            raise ValueError(f"profiling on {device} failed: {failure.message}") from failure
        except Exception as exc:  # OpenVINO raises RuntimeError and others
            raise ValueError(f"profiling on {device} failed: {openvino_error_text(exc)}") from exc
        node_time = {node: float(np.median(times)) for node, times in per_node.items()}
        return _attribute_node_times(compiled.get_runtime_model(), node_time, self._op_names)

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

    def _compile(self, model: ov.Model, device: str, deadline: float,
                 info: dict[str, object]) -> ov.CompiledModel:
        """Compile on ``device``, add the time to ``info['compile_s']``, check the budget after."""
        start = time.perf_counter()
        try:
            compiled = self.device_set.core.compile_model(model, device)
        except Exception as exc:  # OpenVINO raises RuntimeError and others
            raise _StageFailure("compile", f"compiling on {device} failed: {openvino_error_text(exc)}") from exc
        finally:
            info["compile_s"] = float(info.get("compile_s", 0.0)) + time.perf_counter() - start
        if time.perf_counter() > deadline:
            raise _StageFailure("timeout", self._timeout_message(info, runs=0))
        return compiled

    def _prepare(self, affinity: Mapping[str, str], used: list[str], deadline: float,
                 info: dict[str, object]) -> _Runner:
        """Compile the placement, create requests and run it once; pick the path by mode."""
        if self.mode == "pipeline":
            return self._prepare_pipeline(affinity, deadline, info)
        if self.mode == "hetero" or len(used) == 1:
            return self._prepare_hetero(affinity, used, deadline, info)
        try:
            runner = self._prepare_hetero(affinity, used, deadline, info)
            self._check_threads(runner, used)
            return runner
        except _StageFailure as failure:
            if failure.stage == "timeout":
                raise
            info["hetero_error"] = failure.message
            return self._prepare_pipeline(affinity, deadline, info)

    def _thread_limit(self, used: Sequence[str]) -> int:
        """Most threads one inference may keep busy (devices run one after another); 0 = no limit."""
        threads = [self.device_set.info(d).threads for d in used]
        return 0 if 0 in threads else max(threads)

    def _check_threads(self, runner: _Runner, used: Sequence[str]) -> None:
        """Fail when a few runs keep more threads busy than the devices are configured for.

        HETERO with two instances of the CPU plugin was seen to run its
        sub-models on all cores whatever INFERENCE_NUM_THREADS says, which makes
        split placements look faster than single-device ones.
        """
        limit = self._thread_limit(used)
        if not limit:
            return
        busy = _busy_threads(runner, _THREAD_PROBE_RUNS)
        if busy > limit * _OVERSUBSCRIPTION:
            raise _StageFailure(
                "infer", f"HETERO kept {busy:.1f} threads busy where each device may use {limit}, "
                         "so its timing is not comparable with other placements")

    def _prepare_hetero(self, affinity: Mapping[str, str], used: list[str], deadline: float,
                        info: dict[str, object]) -> _RequestRunner:
        """Whole model on one device, or HETERO with every op's affinity set (on a clone)."""
        if len(used) == 1:
            info["path"] = "single"
            compiled = self._compile(self.model, used[0], deadline, info)
        else:
            info["path"] = "hetero"
            work = self.model.clone()
            for op in work.get_ordered_ops():
                op.get_rt_info()["affinity"] = affinity[op.get_friendly_name()]
            compiled = self._compile(work, "HETERO:" + ",".join(used), deadline, info)
        try:
            runner = _RequestRunner(compiled, self._input_tensors())
        except Exception as exc:  # OpenVINO raises RuntimeError and others
            raise _StageFailure("compile", f"creating the infer request failed: {openvino_error_text(exc)}") from exc
        runner.infer()
        return runner

    def _prepare_pipeline(self, affinity: Mapping[str, str], deadline: float,
                          info: dict[str, object]) -> _PipelineRunner:
        """Split into stage models, compile each on its device, run once."""
        info["path"] = "pipeline"
        try:
            stages, output_keys = split_stages(self.model, affinity)
        except Exception as exc:  # OpenVINO raises RuntimeError and others
            raise _StageFailure("compile",
                                f"splitting the model into stages failed: {openvino_error_text(exc)}") from exc
        compiled = [self._compile(stage.model, stage.device, deadline, info) for stage in stages]
        sources: dict[TensorKey, ov.Tensor] = {
            (param.get_friendly_name(), 0): tensor
            for param, tensor in zip(self.model.get_parameters(), self._input_tensors())
        }
        for result in self.model.get_results():  # a model output taken straight from a Constant
            producer = result.input_value(0).get_node()
            if producer.get_type_name() == "Constant":
                sources[(producer.get_friendly_name(), 0)] = producer.get_tensor_view()
        try:
            runner = _PipelineRunner(stages, compiled, sources, output_keys)
        except Exception as exc:  # OpenVINO raises RuntimeError and others
            raise _StageFailure("compile",
                                f"creating the stage infer requests failed: {openvino_error_text(exc)}") from exc
        runner.infer()
        return runner

    def _reference_outputs(self) -> list[np.ndarray]:
        """Outputs of the unsplit model on the first device at f32 (computed once)."""
        if self._reference is None:
            device = next(iter(self.device_set.specs))
            try:
                compiled = self.device_set.core.compile_model(
                    self.model, device, {ov.properties.hint.inference_precision(): ov.Type.f32})
                runner = _RequestRunner(compiled, self._input_tensors())
            except Exception as exc:  # OpenVINO raises RuntimeError and others
                raise _StageFailure("infer", f"cannot compute reference outputs on {device}: "
                                             f"{openvino_error_text(exc)}") from exc
            runner.infer()
            self._reference = runner.outputs()
        return self._reference

    def _validate(self, runner: _Runner, used: list[str], info: dict[str, object]) -> None:
        """Compare the last inference's outputs with the unsplit f32 model's."""
        precisions = {self.device_set.info(d).precision for d in used}
        tolerance = max(_TOLERANCE.get(p, max(_TOLERANCE.values())) for p in precisions)
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
            raise _StageFailure(
                "infer",
                f"outputs differ from the unsplit model's: max abs error {max_abs:.3g} "
                f"(relative {max_rel:.3g}) exceeds the tolerance {tolerance:g} "
                f"for precisions {sorted(precisions)}",
            )

    def _time(self, runner: _Runner, used: Sequence[str], deadline: float,
              info: dict[str, object]) -> list[float]:
        """Warm-up runs, then ``repeats`` blocks of ``block`` runs; returns block means."""
        return _time_runs(runner, self.timing, self._thread_limit(used), deadline, info)

    def _timeout_message(self, info: Mapping[str, object], runs: int) -> str:
        return _timeout_text(self.timing, info, runs)


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
        if base.upper() in _RESERVED_NAMES:
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
    except Exception:  # OpenVINO raises RuntimeError and others: the property is optional
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
            ``.xml`` / ``.onnx`` path for :func:`hsdag_ray.core.models.load_model`.
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
        from hsdag_ray.core.models import load_model

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
        inputs = [ov.Tensor(array, shared_memory=True) for array in _random_inputs(model, seed)]
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
            compiled = core.compile_model(model, auto_device, config)
        except Exception as exc:  # OpenVINO raises RuntimeError and others
            raise _StageFailure("compile", f"compiling on {auto_device} failed: "
                                           f"{openvino_error_text(exc)}") from exc
        finally:
            info["compile_s"] = time.perf_counter() - compile_start
        if time.perf_counter() > deadline:
            raise _StageFailure("timeout", _timeout_text(timing, info, runs=0))
        try:
            runner = _RequestRunner(compiled, inputs)
        except Exception as exc:  # OpenVINO raises RuntimeError and others
            raise _StageFailure("compile", f"creating the infer request failed: "
                                           f"{openvino_error_text(exc)}") from exc
        runner.infer()
        limit = timing.threads if all(d.split(".")[0] == "CPU" for d in candidates) else 0
        samples = _time_runs(runner, timing, limit, deadline, info)
    except _StageFailure as failure:
        info["measure_s"] = time.perf_counter() - start
        return Measurement.failure(AUTO_BACKEND, failure.stage, failure.message, **info)
    try:
        info["execution_devices"] = [str(d) for d in compiled.get_property("EXECUTION_DEVICES")]
    except Exception:  # OpenVINO raises RuntimeError and others: the property is optional
        info["execution_devices"] = None
    latency, spread = summarize_times(samples)
    info["measure_s"] = time.perf_counter() - start
    return Measurement(
        ok=True, latency_s=latency, spread=spread, runs=len(samples) * timing.block,
        backend=AUTO_BACKEND, samples_s=samples, info=info,
    )


def _time_runs(runner: _Runner, timing: TimingConfig, limit: int, deadline: float,
               info: dict[str, object]) -> list[float]:
    """Warm-up runs, then ``timing.repeats`` blocks of ``timing.block`` runs; returns block means.

    Sets ``info['cpu_per_wall']``, and ``info['warning']`` when more than
    ``limit`` threads (0 = no limit) were busy; raises ``_StageFailure('timeout')``
    past ``deadline``.
    """
    runs = 0
    for _ in range(timing.warmup):
        runner.infer()
        runs += 1
        if time.perf_counter() > deadline:
            raise _StageFailure("timeout", _timeout_text(timing, info, runs))
    samples = []
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    for _ in range(timing.repeats):
        start = time.perf_counter()
        for _ in range(timing.block):
            runner.infer()
            runs += 1
            if time.perf_counter() > deadline:
                raise _StageFailure("timeout", _timeout_text(timing, info, runs))
        samples.append((time.perf_counter() - start) / timing.block)
    busy = _cpu_per_wall(cpu_start, wall_start)
    info["cpu_per_wall"] = busy
    if limit and busy > limit * _OVERSUBSCRIPTION:
        info["warning"] = (f"{busy:.1f} threads were busy where each device may use {limit}; "
                           "this timing is not comparable with runs that kept the limit")
    return samples


def _timeout_text(timing: TimingConfig, info: Mapping[str, object], runs: int) -> str:
    return (f"measurement exceeded its time budget of {timing.timeout_s:g} s after "
            f"{runs} runs (compile took {float(info.get('compile_s', 0.0)):.2f} s); "
            "raise TimingConfig.timeout_s or lower warmup/repeats/block")


def _busy_threads(runner: _Runner, runs: int) -> float:
    """Process CPU time over wall time during ``runs`` inferences (about the busy threads)."""
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    for _ in range(runs):
        runner.infer()
    return _cpu_per_wall(cpu_start, wall_start)


def _cpu_per_wall(cpu_start: float, wall_start: float) -> float:
    """Process CPU seconds per wall second since the given ``process_time`` / ``perf_counter``."""
    return (time.process_time() - cpu_start) / max(time.perf_counter() - wall_start, 1e-9)


def _attribute_node_times(runtime: ov.Model, node_time: Mapping[str, float],
                          op_names: Sequence[str]) -> dict[str, float]:
    """Map runtime-node times onto original op names (rules in OpenVINOBackend.profile_ops)."""
    times = {name: 0.0 for name in op_names}
    main_op: dict[str, Optional[str]] = {}
    for node in runtime.get_ordered_ops():
        node_name = node.get_friendly_name()
        rt_info = node.get_rt_info()
        originals = ([n.strip() for n in rt_info["originalLayersNames"].astype(str).split(",") if n.strip()]
                     if "originalLayersNames" in rt_info else [])
        originals = [n for n in originals if n in times]
        main_op[node_name] = node_name if node_name in originals else (originals[0] if originals else None)
    for node in runtime.get_ordered_ops():
        node_name = node.get_friendly_name()
        target = main_op[node_name]
        if target is None:  # plugin-inserted: charge the consumer, else the producer
            neighbours = [i.get_node().get_friendly_name()
                          for o in node.outputs() for i in o.get_target_inputs()]
            neighbours += [v.get_node().get_friendly_name() for v in node.input_values()]
            target = next((main_op[n] for n in neighbours if main_op.get(n)), None)
        if target is not None:
            times[target] += node_time.get(node_name, 0.0)
    return times
