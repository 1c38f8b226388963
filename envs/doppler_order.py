"""The ``parallel`` objective's list schedule in DOPPLER's event order.

DOPPLER's simulator (``env/cost.py`` of the repository xinyuyao/Doppler) runs one simpy
process per op and one per edge: an edge's process waits for its source's finish event,
then for its transfer (``comm[src]`` across devices, 0 within one), and an op's process
waits for all its input edges (``AllOf``), requests its device (a ``simpy.Resource`` of
capacity 1, granted first come first served), computes, releases the device and
triggers its finish event. Ops ready on one device at the same time are served in the
order their requests were made, which is simpy's event order: events at the same time
are processed in the order they were scheduled.

:func:`doppler_schedule` replays that order without simpy: one heap of ``(time, sequence)``
events of the same kinds, scheduled in the order simpy schedules them (events that wake
nobody are left out; they do not change the order of the others). Times are whole ticks
(:attr:`hsdag_core.costgraph.CostGraph.time_tick_s`), so equal times tie exactly as
DOPPLER's integer times do. Edge processes wake in the cost graph's edge order within a
source (the file order, as DOPPLER's networkx graph lists them) and ops start in node
order.
"""
from __future__ import annotations

import heapq
from typing import Any

import numpy as np

__all__ = ["doppler_schedule", "ticks"]

# event kinds, named after DOPPLER's simpy events
_READY, _GRANT, _DONE, _RELEASE, _FINISH, _ARRIVE, _EDGE_END = range(7)


def ticks(seconds: np.ndarray, tick_s: float | None) -> list:
    """``seconds`` as whole ticks (Python ints; ``inf`` stays a float), or as they are
    without a tick."""
    if tick_s is None:
        return np.asarray(seconds, dtype=np.float64).tolist()
    x = np.asarray(seconds, dtype=np.float64)
    out = np.rint(np.where(np.isfinite(x), x, 0.0) / tick_s).astype(np.int64).tolist()
    return [v if f else float("inf") for v, f in zip(out, np.isfinite(x).tolist())]


def doppler_schedule(sim: Any, placement: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """``(start, finish, busy, crossings)`` of the list schedule of ``placement`` in
    DOPPLER's event order (module docstring); ``sim`` is the
    :class:`envs.simulator.Simulator` of the graph (its adjacency and transfer ticks)."""
    g = sim.graph
    n, D = g.num_nodes, g.num_devices
    tick = g.time_tick_s
    p = placement.tolist()
    cost = ticks(g.compute_s[np.arange(n), placement], tick)
    ptr, succ, succ_t = sim._succ_ptr.tolist(), sim._succ_dst.tolist(), sim._succ_tensor.tolist()
    send = sim._doppler_send  # [T] transfer ticks of each tensor across devices
    indeg = sim._indeg.tolist()
    arrived = [0] * n
    start = [0] * n
    finish = [0] * n
    busy = [0] * D
    holder = [-1] * D            # the op holding each device
    waiting: list[list[int]] = [[] for _ in range(D)]
    heads = [0] * D              # first waiting request of each device
    crossings: set[int] = set()
    heap: list[tuple] = []
    seq = 0
    for i in range(n):           # ops without inputs: their AllOf succeeds at once
        if indeg[i] == 0:
            heap.append((0, seq, _READY, i))
            seq += 1
    heapq.heapify(heap)
    push, pop = heapq.heappush, heapq.heappop
    while heap:
        now, _, kind, x = pop(heap)
        if kind == _READY:            # the op's inputs are in: it requests its device
            d = p[x]
            waiting[d].append(x)
            if holder[d] < 0:
                holder[d] = waiting[d][heads[d]]
                heads[d] += 1
                push(heap, (now, seq, _GRANT, holder[d]))
                seq += 1
        elif kind == _GRANT:          # the request is granted: compute
            start[x] = now
            push(heap, (now + cost[x], seq, _DONE, x))
            seq += 1
        elif kind == _DONE:           # release the device, then trigger the finish event
            d = p[x]
            finish[x] = now
            busy[d] += cost[x]
            holder[d] = -1
            push(heap, (now, seq, _RELEASE, d))
            push(heap, (now, seq + 1, _FINISH, x))
            seq += 2
        elif kind == _RELEASE:        # the next waiting request of the device, if any
            if holder[x] < 0 and heads[x] < len(waiting[x]):
                holder[x] = waiting[x][heads[x]]
                heads[x] += 1
                push(heap, (now, seq, _GRANT, holder[x]))
                seq += 1
        elif kind == _FINISH:         # every out-edge's process starts its transfer
            px = p[x]
            for k in range(ptr[x], ptr[x + 1]):
                pj = p[succ[k]]
                delay = 0
                if pj != px:
                    delay = send[succ_t[k]]
                    crossings.add(succ_t[k] * D + pj)
                push(heap, (now + delay, seq, _ARRIVE, k))
                seq += 1
        elif kind == _ARRIVE:         # the edge's process ends
            push(heap, (now, seq, _EDGE_END, x))
            seq += 1
        else:                         # _EDGE_END: one more input of the op is in
            j = succ[x]
            arrived[j] += 1
            if arrived[j] == indeg[j]:
                push(heap, (now, seq, _READY, j))
                seq += 1
    scale = tick if tick is not None else 1.0
    return (np.asarray(start, dtype=np.float64) * scale, np.asarray(finish, dtype=np.float64) * scale,
            np.asarray(busy, dtype=np.float64) * scale, len(crossings))
