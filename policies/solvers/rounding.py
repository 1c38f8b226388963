"""Placements from the sequential MILP's LP relaxation: its shares of each node on each device.

Two roundings, and the better of them under the simulator:

- **argmax**: each node on the device of its largest share. Right where the relaxation is
  nearly integral, as it is on most posterior samples of refit's model.
- **fill**: the fractional nodes, in topological order, stay on one device while its
  share of their bytes lasts, then move on to the device of their support with the most
  share left. Where two devices run the graph alike and differ in memory (a 64 MB and a
  32 MB accelerator), the relaxation splits every node between them in the ratio of
  their memories at no transfer cost, since each edge's joint placement keeps both ends
  on one device fraction by fraction; argmax then puts every node on the larger device
  and the repair scatters what does not fit, while filling cuts the graph into
  contiguous memory-sized segments, which is what a placement within the limits does.
  It is tried from the devices of the first fractional node's largest shares.

Each rounding is moved within the memory and co-location limits
(:func:`hsdag_core.fit.repair`), and the best is improved by single-node moves
(:func:`policies.solvers.polish.polish`) until the deadline.
"""
from __future__ import annotations

import time
from typing import Optional

import numpy as np

from envs.simulator import Simulator
from hsdag_core.costgraph import CostGraph
from hsdag_core.fit import repair
from policies.solvers.polish import polish

__all__ = ["fill_rounding", "round_relaxation"]

#: a share this close to 1 counts as integral
INTEGRAL = 1e-6
#: the fill rounding starts from at most this many devices of the first fractional node's
#: support, those of its largest shares (where many identical accelerators share a node,
#: fills that start on each of them differ only in their labels)
FILL_STARTS = 3


def fill_rounding(g: CostGraph, share: np.ndarray, first: int) -> np.ndarray:
    """The fill rounding (module docstring) of ``share`` (``[nodes, devices]``), starting on
    device ``first``; integral nodes keep their device."""
    p = share.argmax(axis=1)
    frac = np.flatnonzero(share.max(axis=1) < 1 - INTEGRAL)
    # a node's weight is its bytes, and a little for nodes of none, so they too use a share
    w = g.mem_bytes + max(float(g.mem_bytes.mean()), 1.0) * 1e-3
    left = (share[frac] * w[frac, None]).sum(axis=0)
    cur = first
    for i in frac:
        support = share[i] > INTEGRAL
        if not support[cur] or left[cur] < 0.5 * w[i]:
            cands = np.flatnonzero(support)
            cur = int(cands[np.argmax(left[cands])])
        p[i] = cur
        left[cur] -= w[i]
    return p


def round_relaxation(g: CostGraph, share: np.ndarray, deadline: float
                     ) -> Optional[tuple[np.ndarray, float]]:
    """The best rounding of ``share`` within the limits, polished until ``deadline`` (a
    :func:`time.perf_counter` time), and its sequential latency; None when no rounding fits."""
    sim = Simulator(g)
    frac = np.flatnonzero(share.max(axis=1) < 1 - INTEGRAL)
    cands = [share.argmax(axis=1)]
    if frac.size:
        support = np.flatnonzero(share[frac[0]] > INTEGRAL)
        firsts = support[np.argsort(-share[frac[0], support], kind="stable")][:FILL_STARTS]
        cands += [fill_rounding(g, share, int(d)) for d in firsts]
    best, best_v = None, np.inf
    for k, p in enumerate(cands):
        left = deadline - time.perf_counter()
        if k and left <= 0:
            break
        fits = repair(g, p, max(0.5 * left / (len(cands) - k), 0.02))
        if fits is None:
            continue
        v = sim.evaluate(fits, "sequential").value
        if v < best_v:
            best, best_v = fits, v
    if best is None:
        return None
    placement, value, _ = polish(sim, best, "sequential", deadline)
    return placement, value
