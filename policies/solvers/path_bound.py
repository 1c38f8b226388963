"""A lower bound on the sequential objective that counts the transfers a split into
memory-sized parts must pay, along paths (:func:`sequential_bound`).

The cheap bound of :func:`policies.solvers.bounds.lower_bound` is the sum of every node's
fastest time; on a graph whose memory needs several accelerators, every placement also
pays the tensors its cuts send, and along one path the least such cost is a dynamic
program over cuts of the path into memory-sized segments.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hsdag_core.costgraph import CostGraph
from policies.solvers.bounds import lower_bound
from policies.solvers.latency_bound import longest_path
from policies.solvers.result import device_classes

__all__ = ["sequential_bound", "EXACT_LENGTHS", "JUMP_STATES", "PATH_BOUND_FROM_S"]

PATH_BOUND_FROM_S = 10.0
"""The solvers of the sequential objective (its MILP, ``segments``) add
:func:`sequential_bound` to their bound when given at least this many seconds (or no
limit) on a graph with a memory limit (it takes up to a few seconds on hundreds of
nodes); the short solves of refit's proposals skip it."""

EXACT_LENGTHS = 16
"""The path bound's dynamic program remembers the length of the segment before the last
one exactly up to this many positions, and beyond it in 12 steps of equal ratio up to
the path's length (a lower bound on that length, so on the segment's memory)."""

JUMP_STATES = 1e7
"""At most this many states (``(L+1)**2`` per class and remembered length): fewer
remembered lengths on a long path."""


class _OffPath(NamedTuple):
    """The nodes off a path and where their routes reach it (through nodes off the path)."""
    pos: np.ndarray        # each node's position on the path, -1 off it
    lo: np.ndarray         # first and last position their routes reach
    hi: np.ndarray
    closed: np.ndarray     # off the path, and every route reaches the path
    succ: list[list[int]]
    on_path: np.ndarray    # every consumer is on the path
    out: np.ndarray        # each node's cheapest tensor to send


def _off_path(g: CostGraph, P: np.ndarray, move: np.ndarray) -> _OffPath:
    """:class:`_OffPath` for path ``P``, shared by :func:`_feeders` and :func:`_branches`."""
    n, L = g.num_nodes, P.size
    pos = np.full(n, -1, dtype=np.int64)
    pos[P] = np.arange(L)
    lo = np.full(n, L, dtype=np.int64)
    hi = np.full(n, -1, dtype=np.int64)
    closed = np.zeros(n, dtype=bool)
    succ: list[list[int]] = [[] for _ in range(n)]
    for u, v in zip(g.edge_src.tolist(), g.edge_dst.tolist()):
        succ[u].append(v)
    for v in range(n - 1, -1, -1):               # nodes are topologically indexed
        if pos[v] >= 0 or not succ[v]:
            continue
        ok = True
        for w in succ[v]:
            if pos[w] >= 0:
                lo[v], hi[v] = min(lo[v], pos[w]), max(hi[v], pos[w])
            elif closed[w]:
                lo[v], hi[v] = min(lo[v], lo[w]), max(hi[v], hi[w])
            else:
                ok = False
        closed[v] = ok
    on_path = np.array([bool(succ[v]) and all(pos[w] >= 0 for w in succ[v]) for v in range(n)])
    out = np.full(n, np.inf)
    np.minimum.at(out, g.edge_src, move[g.edge_tensor])
    return _OffPath(pos, lo, hi, closed, succ, on_path, out)


def _chords(g: CostGraph, pos: np.ndarray, ptensor: np.ndarray) -> list[tuple[int, int, np.ndarray]]:
    """The tensors a path node sends to later path nodes other than through the path's
    own edge: ``(position, tensor, sorted positions of its consumers on the path)``."""
    ends: dict[tuple[int, int], list[int]] = {}
    for u, v, t in zip(pos[g.edge_src].tolist(), pos[g.edge_dst].tolist(), g.edge_tensor.tolist()):
        if u >= 0 and v > u and not (v == u + 1 and t == ptensor[u]):
            ends.setdefault((u, t), []).append(v)
    return [(a, t, np.unique(v)) for (a, t), v in ends.items()]


def _path_cut(graph: CostGraph, path: list[int], base: np.ndarray, move: np.ndarray) -> float:
    """The least sequential cost of ``path``'s nodes and of the transfers between them
    over cuts of the path into segments that each fit one device's memory.

    Consecutive segments lie on different devices, so a change sends the path's tensor
    and every other tensor (a *chord*: a skip connection) that a node of the segment
    before sends to a node of the segment after. A chord that skips one whole segment
    is counted when the two segments around it cannot share a device: their memory
    together exceeds the device's (a chord that skips more is not counted). Devices are
    taken by class (:func:`policies.solvers.result.device_classes`): two consecutive
    segments on one class need two of its devices.
    Each segment also pays for the nodes off the path that feed it (:func:`_feeders`,
    :func:`_branches`: the larger of the two).
    The dynamic program keeps the last segment's start and a lower bound on the length of
    the one before it (exact up to ``EXACT_LENGTHS`` positions, then in steps of equal
    ratio; ``JUMP_STATES`` caps their number), so each change knows the segments around
    it, which chords the one before them sends, and how much memory it holds at least."""
    g = graph
    P = np.asarray(path, dtype=np.int64)
    L = P.size
    classes = device_classes(g)
    rep = np.array([c[0] for c in classes], dtype=np.int64)
    count = np.array([len(c) for c in classes], dtype=np.int64)
    C = rep.size
    on_edge = {(u, v): t for u, v, t in zip(g.edge_src.tolist(), g.edge_dst.tolist(),
                                            g.edge_tensor.tolist())}
    ptensor = np.array([on_edge[(int(P[k]), int(P[k + 1]))] for k in range(L - 1)], dtype=np.int64)
    c = move[ptensor]
    cs = g.compute_s[P][:, rep]
    runs = np.isfinite(cs)
    comp = np.concatenate([np.zeros((1, C)), np.cumsum(np.where(runs, cs, 0.0), axis=0)])
    cant = np.concatenate([np.zeros((1, C)), np.cumsum(~runs, axis=0)])
    mem = np.concatenate([[0.0], np.cumsum(g.mem_bytes[P])])
    cap = g.mem_capacity[rep] * (1 + 1e-12)
    off = _off_path(g, P, move)
    side = np.maximum(_feeders(g, P, base, mem, rep, off),            # [C, L, L]
                      _branches(g, P, base, mem, rep, off))
    # seg[c, i, k]: the segment of positions i..k-1 on class c
    ii, kk = np.meshgrid(np.arange(L + 1), np.arange(L + 1), indexing="ij")
    seg = np.full((C, L + 1, L + 1), np.inf)
    ok = kk > ii
    for q in range(C):
        s = comp[kk, q] - comp[ii, q]
        good = ok & (cant[kk, q] == cant[ii, q]) & (mem[kk] - mem[ii] <= cap[q])
        s = s + np.where(ok, side[q][np.minimum(ii, L - 1), np.maximum(kk - 1, 0)], 0.0)
        seg[q] = np.where(good, s, np.inf)
    other = np.array([[a != b or count[a] >= 2 for b in range(C)] for a in range(C)])  # [c, c']
    items = _chords(g, off.pos, ptensor)
    # F[i, k, c, b]: 0..k-1 covered, last segment i..k-1 on c, the one before it at least
    # lengths[b] long (0: none)
    lengths = np.unique(np.concatenate([np.arange(min(L, EXACT_LENGTHS) + 1),
                                        np.geomspace(EXACT_LENGTHS, max(L, EXACT_LENGTHS), 12).astype(np.int64)]))
    lengths = lengths[lengths <= L][:max(1, int(JUMP_STATES // (C * (L + 1) ** 2)))] if items else lengths[:1]
    nb = lengths.size
    F = np.full((L + 1, L + 1, C, nb), np.inf)
    F[0, 1:, :, 0] = seg[:, 0, 1:].T
    limited = [q for q in range(C) if np.isfinite(cap[q])]
    for j in range(1, L):
        A = F[:j, j]                                                   # [i, C, nb]
        if not np.isfinite(A).any():
            continue
        Amin = np.stack([np.where(other[:, q][None, :, None], A, np.inf).min(axis=1)
                         for q in range(C)], axis=2)                   # [i, b, q]
        reach = {q: int(np.searchsorted(mem, mem[j] + cap[q], side="right")) - j - 1 for q in limited}
        K = max(reach.values(), default=0)                 # the longest segment at j that fits
        Z = np.zeros((j, L + 2))              # chords from the segment before, by producer
        over: list[tuple[np.ndarray, np.ndarray, int, float]] = []   # chords over it
        for a, t, ends in items:
            after = np.searchsorted(ends, j)
            if a >= j or after == ends.size:
                continue
            b = ends[after]                    # its first consumer from j on
            if not (a == j - 1 and t == ptensor[a]):   # the path's own tensor is paid by c
                Z[a, b + 1] += move[t]
            i = np.arange(a + 1, min(j, a + lengths[-1] + 1))
            if b - j < K and i.size:
                over.append((i, np.searchsorted(lengths, i - a), b - j, move[t]))
        X = np.cumsum(np.cumsum(Z[::-1], axis=0)[::-1], axis=1)[:, j + 1:L + 1]   # [i, k]
        tot = np.repeat(Amin.min(axis=1)[:, None, :], L - j, axis=1)      # [i, k, q]
        if over:
            r, at = np.unique(np.concatenate([o[0] for o in over]), return_inverse=True)
            J = np.zeros((r.size, nb, K))     # by the start of the segment before, the length needed
            np.add.at(J, (at, np.concatenate([o[1] for o in over]),
                          np.concatenate([np.full(o[0].size, o[2]) for o in over])),
                      np.concatenate([np.full(o[0].size, o[3]) for o in over]))
            W = np.cumsum(np.cumsum(J, axis=1), axis=2)                         # [r, b, k]
            held = mem[r][:, None] - mem[np.maximum(r[:, None] - lengths[None, :], 0)]   # [r, b]
            for q in limited:
                kq = reach[q]
                if kq <= 0:
                    continue
                apart = held[:, :, None] + (mem[j + 1:j + 1 + kq] - mem[j])[None, None, :] > cap[q]
                tot[r, :kq, q] = (Amin[r, :, None, q] + W[:, :, :kq] * apart).min(axis=1)
        tot += X[:, :, None]
        now = np.searchsorted(lengths, j - np.arange(j), side="right") - 1
        for length in np.unique(now).tolist():
            F[j, j + 1:, :, length] = tot[now == length].min(axis=0) + c[j - 1] + seg[:, j, j + 1:].T
    return float(F[:, L].min()) + float(base.sum() - base[P].sum())


def _feeders(g: CostGraph, P: np.ndarray, base: np.ndarray, mem: np.ndarray, devs: np.ndarray,
             off: _OffPath) -> np.ndarray:
    """``[len(devs), L, L]``: for a segment ``i..j`` of the path on device ``devs[q]``, the least extra
    cost of the nodes off the path whose consumers all lie in it: each is on that device (its
    time there over its fastest, its memory) or sends its tensor there, the choice
    relaxed to a fractional knapsack in what memory the segment leaves."""
    L = P.size
    lo, hi, c_w = off.lo, off.hi, off.out
    items = np.flatnonzero((off.pos < 0) & off.on_path)                # consumers all on the path
    out = np.zeros((len(devs), L, L))
    if not items.size:
        return out
    done: dict[tuple, np.ndarray] = {}
    for q, d in enumerate(devs.tolist()):
        key = (g.mem_capacity[d], g.compute_s[items, d].tobytes())
        if key in done:
            out[q] = done[key]
            continue
        extra = g.compute_s[items, d] - base[items]
        gain = np.where(np.isfinite(extra), c_w[items] - extra, -np.inf)
        w = g.mem_bytes[items]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(w > 0, gain / w, np.inf)
        o = np.argsort(-ratio, kind="stable")
        lo_o, hi_o, c_o, g_o, w_o = lo[items][o], hi[items][o], c_w[items][o], gain[o], w[o]
        pos_gain = g_o > 0
        res = np.zeros((L, L))
        for i in range(L):
            inseg = (lo_o[None, :] >= i) & (hi_o[None, :] <= np.arange(L)[:, None])   # [j, item]
            paid = (inseg * c_o).sum(axis=1)
            take = inseg & pos_gain
            cm = np.cumsum(take * w_o, axis=1)
            room = (g.mem_capacity[d] - (mem[1:] - mem[i]))[:, None]
            whole = take & (cm <= room)
            got = (whole * np.where(pos_gain, g_o, 0.0)).sum(axis=1)
            over = take & (cm > room)
            has = over.any(axis=1)
            if has.any():
                r = np.flatnonzero(has)
                k = over[r].argmax(axis=1)
                before = cm[r, k] - w_o[k]
                frac = np.clip((room[r, 0] - before) / np.where(w_o[k] > 0, w_o[k], 1.0), 0, 1)
                got[r] += frac * g_o[k]
            res[i] = np.maximum(paid - got, 0.0)
        done[key] = out[q] = res
    return out


def _branches(g: CostGraph, P: np.ndarray, base: np.ndarray, mem: np.ndarray, devs: np.ndarray,
              off: _OffPath) -> np.ndarray:
    """``[len(devs), L, L]``: for a segment ``i..j`` of the path on device ``devs[q]``, the least
    extra cost of the nodes off the path whose every route (through nodes off the path) reaches
    the path in it, such as the other branches of an Inception module.

    Each is on that device (its time there over its fastest, its memory) or elsewhere. Every
    node elsewhere reaches one elsewhere whose tensor goes to a node on the device (its
    *last*), so what is elsewhere holds at most the memory of the last nodes and their
    ancestors among these nodes, saves at most their extra time, and pays each last node's
    tensor. The memory the segment cannot hold must go: a fractional covering knapsack over
    the last nodes, by cost per byte; a node that cannot run on the device and feeds only
    the path is always last."""
    n, L = g.num_nodes, P.size
    lo, hi, succ = off.lo, off.hi, off.succ
    items = np.flatnonzero(off.closed)
    out = np.zeros((len(devs), L, L))
    if not items.size:
        return out
    idx = np.full(n, -1, dtype=np.int64)
    idx[items] = np.arange(items.size)
    anc = np.eye(items.size, dtype=bool)                 # anc[v, u]: u reaches v (or is v)
    for u in items.tolist():                             # topological order
        for w in succ[u]:
            if idx[w] >= 0:
                anc[idx[w]] |= anc[idx[u]]
    c = off.out[items]
    w = g.mem_bytes[items]
    M = anc.astype(np.float64) @ w
    only_path = off.on_path[items]
    for q, d in enumerate(devs.tolist()):
        extra = g.compute_s[items, d] - base[items]
        fin = np.isfinite(extra)
        ex = np.where(fin, extra, 0.0)
        val = c - anc.astype(np.float64) @ ex
        forced = ~fin & only_path                         # elsewhere, and its consumers on the device
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(M > 0, val / M, np.where(val <= 0, -np.inf, np.inf))
        o = np.argsort(np.where(forced, -np.inf, ratio), kind="stable")
        lo_o, hi_o, val_o, M_o, w_o, ex_o = lo[items][o], hi[items][o], val[o], M[o], w[o], ex[o]
        must = (val_o <= 0) | forced[o]
        res = np.zeros((L, L))
        for i in range(L):
            k_ = lo_o >= i
            jj = np.arange(i, L)
            inseg = hi_o[k_][None, :] <= jj[:, None]                  # [j, item]
            vk, Mk, wk, ek, mk = val_o[k_], M_o[k_], w_o[k_], ex_o[k_], must[k_]
            need = (inseg * wk).sum(axis=1) + (mem[jj + 1] - mem[i]) - g.mem_capacity[d]
            taken = inseg & mk
            cost = (inseg * ek).sum(axis=1) + (taken * vk).sum(axis=1)
            got = (taken * Mk).sum(axis=1)
            opt = inseg & ~mk
            cm = got[:, None] + np.cumsum(opt * Mk, axis=1)
            whole = opt & (cm <= need[:, None])
            cost += (whole * vk).sum(axis=1)
            cover = got + (whole * Mk).sum(axis=1)
            part = opt & (cm > need[:, None]) & (cover < need)[:, None]
            r = np.flatnonzero(part.any(axis=1))
            if r.size:
                k = part[r].argmax(axis=1)
                cost[r] += np.clip((need[r] - cover[r]) / np.where(Mk[k] > 0, Mk[k], 1.0), 0, 1) * vk[k]
                cover[r] = need[r]
            res[i, i:] = np.where(cover < need, np.inf, cost)             # even all elsewhere does not fit
        out[q] = res
    return out


def sequential_bound(graph: CostGraph) -> float:
    """A lower bound on the sequential objective that counts the transfers a split into
    memory-sized parts must pay, along paths.

    Along any path, the devices of its nodes change from one segment to the next, each
    segment fitting the memory of its device, and each change sends the path's tensor
    to another device, with every skip connection from the segment before into the
    segment after (a distinct tensor and device per change, so none is counted twice), and
    every skip connection over one whole segment whose neighbours cannot share a device
    (their memory together exceeds it). A node off the path whose consumers all lie in one
    segment is on that segment's device or sends its tensor there (:func:`_feeders`); the
    nodes off the path whose routes all reach it in one segment are on its device or leave
    it, what leaves sending the tensor of its last node (:func:`_branches`). So the sum,
    over the nodes off the path, of their fastest time, plus the least cost of the path's
    nodes, of those transfers and of those nodes over cuts of the path into such segments
    (a dynamic program over the path), bounds the sequential value of every placement.
    The best over a few paths: the longest by memory, by fastest time, and by transfer
    time, each distinct one solved once.
    """
    g = graph
    if g.num_nodes == 0 or g.num_devices < 2:
        return lower_bound(graph, "sequential")
    base = np.min(np.where(np.isfinite(g.compute_s), g.compute_s, np.inf), axis=1)
    tr = g.transfer_s()
    move = tr[:, ~np.eye(g.num_devices, dtype=bool)].min(axis=1)    # cheapest link per tensor
    paths = dict.fromkeys(tuple(p) for p in (        # the same path is solved once
        longest_path(g, g.mem_bytes), longest_path(g, base),
        longest_path(g, np.zeros(g.num_nodes), move[g.edge_tensor])))
    return max(lower_bound(graph, "sequential"), *(_path_cut(g, list(p), base, move) for p in paths))

