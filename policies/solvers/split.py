"""The best split of an order of units into consecutive segments, each on one device.

Shared by the sequential objective's segments (:mod:`policies.solvers.segments`) and the
latency objective's (:func:`policies.solvers.latency.segments`), which differ only in
what a segment costs. Devices come in classes: a class with a memory limit gives each of
its segments a device of its own, in order, so it holds at most as many segments as it
has devices; a class without one runs all its segments on its first device. The dynamic
program's state is the number of devices used in each limited class.
"""
from __future__ import annotations

import itertools
from typing import Optional, Sequence

import numpy as np

__all__ = ["best_split"]


def best_split(seg: Sequence[np.ndarray], devices: Sequence[Sequence[int]],
               limited: Sequence[bool]) -> Optional[np.ndarray]:
    """The device of each unit in the split of least total cost, or None where none is
    finite. ``seg[c][i, j]``: the cost of units ``i..j-1`` as one segment on class ``c``
    (``inf``: not allowed); ``devices[c]``: the class's devices; ``limited[c]``: whether its
    devices are one per segment. Ties go to the earlier class, then the earlier start."""
    C = len(seg)
    nb = seg[0].shape[0] - 1
    lim = [c for c in range(C) if limited[c]]
    slot = {c: q for q, c in enumerate(lim)}          # a limited class's place in a state
    states = list(itertools.product(*(range(len(devices[c]) + 1) for c in lim)))
    index = {st: k for k, st in enumerate(states)}
    f = np.full((nb + 1, len(states)), np.inf)
    arg = np.full((nb + 1, len(states), 3), -1, dtype=np.int64)   # (start, class, previous state)
    f[0, 0] = 0.0                                     # states[0]: no device used
    for j in range(1, nb + 1):
        for k, st in enumerate(states):
            for c in range(C):
                if not devices[c]:
                    continue
                q = slot.get(c)
                if q is None:
                    src = k
                elif st[q] > 0:
                    src = index[st[:q] + (st[q] - 1,) + st[q + 1:]]
                else:
                    continue
                via = f[:j, src] + seg[c][:j, j]
                i = int(np.argmin(via))
                if via[i] < f[j, k]:
                    f[j, k] = via[i]
                    arg[j, k] = (i, c, src)
    k = int(np.argmin(f[nb]))
    if not np.isfinite(f[nb, k]):
        return None
    on = np.empty(nb, dtype=np.int64)
    j = nb
    while j > 0:
        i, c, prev = (int(x) for x in arg[j, k])
        q = slot.get(c)
        on[i:j] = devices[c][0] if q is None else devices[c][states[k][q] - 1]
        j, k = i, prev
    return on
