"""Compiled stages kept between placements, so placements that share a stage compile it once.

A stage of the pipeline is determined by its device and its ops: the ops are
contiguous in ``get_ordered_ops()`` order, so the tensors a stage receives and
the tensors it must hand on (those used outside it) follow from its op set
alone, whatever the rest of the placement is. A converging policy proposes
placements that differ in a few nodes and share most stages, which then skip
the compile (0.1-1 s each on a CPU).

The cache is a least-recently-used map bounded by a number of entries and by
an estimate of their memory (the bytes of the stage's constants, which the
compiled stage keeps in its own layout, plus its output tensors); the oldest
entries are dropped first. It lives in one backend, whose devices keep their
settings, so the device name (with its precision and threads) and the op set
make the key.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Hashable, Optional

import openvino as ov

from envs.openvino.stages import TensorKey

__all__ = ["CachedStage", "StageCache", "stage_bytes"]

#: bytes counted for a compiled stage on top of its constants and outputs
ENTRY_OVERHEAD = 64 * 1024


@dataclass
class CachedStage:
    """A compiled stage and what the pipeline needs to run it.

    Attributes:
        device: where it runs.
        inputs: original tensors fed to its parameters, in parameter order.
        outputs: original tensors its results produce, in result order.
        compiled: the compiled model.
        nbytes: the memory estimate it is counted for.
        request: its infer request, created on first use and reused.
    """

    device: str
    inputs: list[TensorKey]
    outputs: list[TensorKey]
    compiled: ov.CompiledModel
    nbytes: int
    request: Optional[ov.InferRequest] = field(default=None, repr=False)


def stage_bytes(model: ov.Model) -> int:
    """Memory estimate of ``model`` once compiled: its constants, its outputs, a fixed overhead."""
    total = ENTRY_OVERHEAD
    for op in model.get_ordered_ops():
        if op.get_type_name() == "Constant":
            total += int(op.get_byte_size())
    for out in model.outputs:
        shape = out.get_partial_shape()
        if shape.is_static:
            size = 1
            for dim in shape.to_shape():
                size *= int(dim)
            total += size * out.get_element_type().size
    return total


class StageCache:
    """A bounded LRU map from a stage key to its :class:`CachedStage`.

    ``max_entries=0`` turns it off (nothing is kept). Counts ``hits``,
    ``misses`` and ``evictions``; ``nbytes`` is the current memory estimate.
    """

    def __init__(self, max_entries: int = 64, max_bytes: int = 1 << 30) -> None:
        self.max_entries = max(0, int(max_entries))
        self.max_bytes = max(0, int(max_bytes))
        self._entries: OrderedDict[Hashable, CachedStage] = OrderedDict()
        self.nbytes = 0
        self.hits = self.misses = self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def get(self, key: Hashable) -> Optional[CachedStage]:
        """The entry for ``key`` (now the most recently used), or None; counts a hit or a miss."""
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return entry

    def put(self, key: Hashable, entry: CachedStage) -> None:
        """Keep ``entry``, then drop the least recently used entries beyond the bounds.

        An entry larger than the byte bound on its own is not kept.
        """
        if not self.max_entries or entry.nbytes > self.max_bytes:
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self.nbytes -= old.nbytes
        self._entries[key] = entry
        self.nbytes += entry.nbytes
        while len(self._entries) > self.max_entries or self.nbytes > self.max_bytes:
            _, dropped = self._entries.popitem(last=False)
            self.nbytes -= dropped.nbytes
            self.evictions += 1

    def clear(self) -> None:
        self._entries.clear()
        self.nbytes = 0
