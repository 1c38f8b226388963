"""PyTorch devices of the torch backend: what ``--devices`` names and how each runs.

A device spec is ``KIND[:INDEX][:DTYPE][:threads=N][:mem=SIZE]``:

* ``cpu``: the CPU in float32; ``cpu:bf16``: the same CPU computing in bfloat16 (a second,
  really different device on one machine: other kernels, other speeds, as ``CPU_F32`` is
  for OpenVINO), the stand-in for a second device in tests;
* ``cpu:threads=1``: the CPU in float32 on one intra-op thread while its stages run (the
  others run on the process's threads): a second, slower device whose speed does not hang
  on what the CPU computes natively, the GPU check's stand-in where bfloat16 is emulated;
* ``cuda:0``, ``cuda:1``, ... (``cuda`` is ``cuda:0``): an NVIDIA GPU in float32;
  ``cuda:0:bf16`` / ``:f16`` in half precision;
* ``:mem=SIZE`` (``300MB``, ``2GB``, ``1.5GiB``) caps the memory the placement may use on
  the device: the fit check refuses a placement whose weights there exceed it, and on a
  GPU ``torch.cuda.set_per_process_memory_fraction`` makes the allocator refuse more, so
  a run out of memory is a failed measurement. This is how a model that does not fit
  the GPU is placed: the cap decides what must run on the CPU.

A device's *name* (what placements, profiles and tables use) is its spec without the
memory cap: ``cuda:0:mem=2GB`` is ``cuda:0``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

__all__ = ["TorchDevice", "parse_device", "check_devices", "parse_size", "DTYPES"]

#: precision suffixes and their torch dtypes' names
DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}
_UNITS = {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30}


@dataclass(frozen=True)
class TorchDevice:
    """One device of the torch backend.

    Attributes:
        name: the name placements use (the spec without ``:mem=``).
        kind: ``cpu`` or ``cuda``.
        index: the CUDA device index (0 on the CPU).
        dtype: ``float32``, ``bfloat16`` or ``float16``: the precision its stages compute in.
        mem_bytes: the memory cap in bytes (``None``: no cap).
        threads: intra-op threads its stages run on (CPU only; ``None``: the process's).
    """

    name: str
    kind: str
    index: int = 0
    dtype: str = "float32"
    mem_bytes: Optional[float] = None
    threads: Optional[int] = None

    @property
    def torch_device(self):
        import torch

        return torch.device(self.kind, self.index) if self.kind == "cuda" else torch.device("cpu")

    @property
    def torch_dtype(self):
        import torch

        return getattr(torch, self.dtype)

    @property
    def is_cuda(self) -> bool:
        return self.kind == "cuda"

    def describe(self) -> str:
        """One line: the name, the hardware and the cap."""
        what = "the CPU"
        if self.is_cuda:
            import torch

            what = (torch.cuda.get_device_name(self.index) if torch.cuda.is_available()
                    else f"CUDA device {self.index}")
        cap = f", capped at {self.mem_bytes / 1e6:.0f} MB" if self.mem_bytes is not None else ""
        threads = f" on {self.threads} thread{'s' * (self.threads != 1)}" if self.threads else ""
        return f"{self.name}: {what} in {self.dtype}{threads}{cap} (PyTorch)"


def parse_size(text: str) -> float:
    """``300MB`` / ``2GB`` / ``1.5GiB`` / ``1000000`` -> bytes (ValueError when unreadable)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMG]i?B|B)?\s*", text, flags=re.IGNORECASE)
    if not m:
        raise ValueError(f"cannot read the memory size {text!r}; write e.g. 300MB or 2GB")
    return float(m.group(1)) * _UNITS[(m.group(2) or "b").lower()]


def parse_device(spec: str) -> TorchDevice:
    """The :class:`TorchDevice` of one spec (ValueError with one sentence when unreadable)."""
    parts = [p for p in spec.strip().split(":")]
    kind = parts[0].lower()
    if kind not in ("cpu", "cuda"):
        raise ValueError(f"unknown torch device {spec!r}; name cpu, cpu:bf16, cuda:0 or "
                         "cuda:0:mem=2GB")
    index, dtype, mem, threads = 0, "float32", None, None
    rest = parts[1:]
    if kind == "cuda" and rest and rest[0].isdigit():
        index = int(rest.pop(0))
    for p in rest:
        low = p.lower()
        if low.startswith("mem="):
            try:
                mem = parse_size(p[4:])
            except ValueError as e:
                raise ValueError(f"{spec}: {e}") from None
            if mem <= 0:
                raise ValueError(f"{spec}: the memory cap must be more than 0")
        elif low.startswith("threads=") and kind == "cpu":
            if not low[8:].isdigit() or int(low[8:]) < 1:
                raise ValueError(f"{spec}: threads= takes a whole number of at least 1, e.g. cpu:threads=1")
            threads = int(low[8:])
        elif low in DTYPES:
            dtype = DTYPES[low]
        else:
            raise ValueError(f"cannot read {p!r} in the torch device {spec!r}; write e.g. "
                             "cpu, cpu:bf16, cpu:threads=1, cuda:0, cuda:0:bf16 or cuda:0:mem=2GB")
    name = kind + (f":{index}" if kind == "cuda" else "")
    if dtype != "float32":
        name += ":" + next(k for k, v in DTYPES.items() if v == dtype)
    if threads is not None:
        name += f":threads={threads}"
    return TorchDevice(name=name, kind=kind, index=index, dtype=dtype, mem_bytes=mem, threads=threads)


def check_devices(specs: Sequence[str]) -> list[TorchDevice]:
    """Parse ``specs`` and check every device exists here: a CUDA device needs a CUDA build
    of PyTorch that sees that index. Raises ValueError with one sentence."""
    devices = [parse_device(s) for s in specs]
    names = [d.name for d in devices]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise ValueError(f"the torch device {dup} is named twice; name each device once")
    cuda = [d for d in devices if d.is_cuda]
    if cuda:
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        missing = [d for d in cuda if d.index >= count]
        if missing:
            have = f"{count} CUDA device(s)" if count else "no CUDA device"
            raise ValueError(f"{missing[0].name} is not here: PyTorch sees {have}; use cpu and "
                             "cpu:bf16 to try the torch backend without a GPU")
    return devices
