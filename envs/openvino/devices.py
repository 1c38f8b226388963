"""Device specs, real and virtual devices, and their registration in one ``openvino.Core``.

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
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import openvino as ov

from hsdag_core.models import openvino_error_text

__all__ = ['DEVICE_ALIASES', 'PRECISIONS', 'RESERVED_NAMES', 'DeviceInfo', 'DeviceSet', 'DeviceSpec', 'check_devices', 'find_plugin_library']


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
RESERVED_NAMES = frozenset({"HETERO", "AUTO", "MULTI", "BATCH", "PROXY"})
_VIRTUAL_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")

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
                    or spec.name.upper() in RESERVED_NAMES or self._is_real(spec.name)):
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
