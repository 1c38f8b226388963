"""Recording profiles on real devices: per-op times and fitted link costs.

:func:`record` times every op of a model on each real device with OpenVINO's
own profiling, adds modeled devices from their specs, and with two real
devices calibrates each device's op times to the whole model run on it
(:func:`calibrate_compute`) and fits the transfer and stage-boundary costs to real
split placements (:func:`fit_link_costs`). The result is a
:class:`~hsdag_core.device_profile.Profile`.
"""
from __future__ import annotations

import os
import sys
from typing import Optional, Sequence

import numpy as np

from hsdag_core.compgraph import CompGraph
from hsdag_core.device_profile import Profile, add_modeled_device, cost_graph, split_placements

__all__ = ["record", "calibrate_compute", "uncalibrated", "fit_link_costs", "busy_note"]


def calibrate_compute(graph: CompGraph, profile: Profile, whole_s: dict[str, float]) -> dict[str, float]:
    """Scale each device's op times so that they add up to the whole model's measured
    latency on that device alone (``whole_s``: device -> seconds; a device missing there,
    or not measured, keeps its times).

    Ops timed one by one do not add up to the model run as one graph: each timing pays
    its own dispatch and synchronisation, and a graph overlaps or fuses what separate
    runs cannot, so the sum is off by a share that is much the same for every op of a
    device (on small models, several tens of per cent). One measurement per device fixes
    that share; :func:`fit_link_costs` then prices only the link. Updates ``profile`` in
    place and returns the factors, also kept in ``profile.fit["compute_scale"]``."""
    base = cost_graph(graph, Profile(profile.model, profile.devices, profile.op_time_s))
    scales: dict[str, float] = {}
    for d, name in enumerate(base.devices):
        summed = float(base.compute_s[:, d].sum())
        y = whole_s.get(name)
        if y is None or not np.isfinite(y) or y <= 0 or summed <= 0:
            continue
        scales[name] = y / summed
        profile.op_time_s[name] = {op: t * scales[name] for op, t in profile.op_time_s[name].items()}
    profile.fit = {**profile.fit, "compute_scale": scales}
    return scales


def uncalibrated(profile: Profile) -> Profile:
    """``profile`` as recorded: op times without :func:`calibrate_compute`'s factors and
    without fitted link costs (compute only), the "before" of the fidelity checks."""
    scales = (profile.fit or {}).get("compute_scale") or {}
    times = {d: {op: t / scales.get(d, 1.0) for op, t in ops.items()}
             for d, ops in profile.op_time_s.items()}
    return Profile(profile.model, profile.devices, times, mem_capacity=dict(profile.mem_capacity))


def fit_link_costs(graph: CompGraph, profile: Profile, placements: Sequence[np.ndarray],
                   measured_s: Sequence[float]) -> dict:
    """Fit the per-crossing cost (``boundary_s``) and the per-transfer costs (link latency
    per tensor moved, bandwidth) to real measurements.

    Model: ``measured - sum of node times = boundary_s * crossings + latency * tensors
    moved + bytes moved / bandwidth``, a crossing being a point of the schedule where
    execution passes from one device to the other. Each row is divided by its measured
    latency, so the fit minimises relative errors (the figure the fidelity checks report)
    rather than letting the slowest placements dominate, and is solved by non-negative
    least squares (``scipy.optimize.nnls``). The placements must cross the link different
    numbers of times with different bytes for the three costs to be told apart. Updates
    ``profile`` and returns the fit figures (coefficients, mean relative error and Spearman
    rank correlation of predicted vs measured, with the fitted costs and with compute only).
    """
    from scipy.optimize import nnls
    from scipy.stats import spearmanr

    from envs.simulator import Simulator

    base = cost_graph(graph, Profile(profile.model, profile.devices, profile.op_time_s))
    sim = Simulator(base)
    rows, rhs, compute_only = [], [], []
    for p, y in zip(placements, measured_s):
        r = sim.sequential(np.asarray(p))
        t, _ = sim.crossings(np.asarray(p))
        rows.append([r.breakdown["stages"] - 1, t.size, float(base.tensor_bytes[t].sum())])
        compute_only.append(r.breakdown["compute_s"])
        rhs.append(y - r.breakdown["compute_s"])
    y = np.asarray(measured_s, dtype=np.float64)
    A, b = np.asarray(rows, dtype=np.float64), np.asarray(rhs)
    Aw, bw = A / y[:, None], b / y  # relative residuals
    scale = np.maximum(Aw.max(axis=0), 1e-12)
    coef, _ = nnls(Aw / scale, bw)
    coef = coef / scale
    profile.boundary_s, profile.link_latency_s = float(coef[0]), float(coef[1])
    profile.link_bandwidth_Bps = float(1.0 / coef[2]) if coef[2] > 0 else float("inf")
    pred = np.asarray(compute_only) + A @ coef
    fit = {"placements": len(y), "boundary_s": profile.boundary_s,
           "link_latency_s": profile.link_latency_s,
           "link_bandwidth_Bps": None if coef[2] <= 0 else profile.link_bandwidth_Bps,
           "crossings": [int(A[:, 0].min()), int(A[:, 0].max())],
           "mean_rel_error": float(np.mean(np.abs(pred - y) / y)),
           "mean_rel_error_compute_only": float(np.mean(np.abs(np.asarray(compute_only) - y) / y)),
           "spearman_fitted": float(spearmanr(pred, y).statistic),
           "spearman_compute_only": float(spearmanr(compute_only, y).statistic)}
    if "compute_scale" in (profile.fit or {}):
        fit["compute_scale"] = profile.fit["compute_scale"]
    profile.fit = fit
    return fit


def busy_note(threshold: float = 0.5) -> Optional[str]:
    """A sentence when the machine is busy (1-minute load average above
    ``threshold`` per core), else None. Per-op times recorded then are
    inflated, unevenly across ops (2-8x on some ops of Inception-V3 with two
    other jobs on 2 cores), and the simulator's optimum moves with them."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # not available on this platform
        return None
    cores = os.cpu_count() or 1
    if load <= threshold * cores:
        return None
    return (f"the machine is busy (load {load:.1f} on {cores} cores), so per-op times may be "
            "inflated; record profiles on an idle machine")


def record(model_spec: str, devices: Sequence[str], modeled: Sequence[str] = (), fit: int = 12,
           timing=None, input_shapes=None, progress: bool = True, backend: str = "auto",
           built=None) -> Profile:
    """Record a profile: per-op times on every real device of ``backend``'s graph source
    (:meth:`envs.source.GraphSource.record_ops`: OpenVINO's profiling, or per-node times of
    the ``torch.export`` graph on PyTorch devices, :mod:`envs.pytorch.profile_ops`), modeled devices from their specs, and (with two or
    more real devices) link and boundary costs fitted to ``fit`` real split placements.
    ``built``: the ``(model, fine graph)`` of ``model_spec`` when the caller has built them
    already (:func:`hsdag_core.coarsening.build_graph` with ``"none"``)."""
    from rich.progress import track

    from envs.backends import graph_source
    from envs.base import TimingConfig

    source = graph_source(backend)
    model, fine = built if built is not None else source.build(model_spec, "none", input_shapes)[:2]
    timing = timing or TimingConfig()
    profile = Profile(model=fine.name, devices={}, op_time_s={}, source=source.name)
    measure = None
    if devices:
        busy = busy_note()
        if busy:
            print(f"warning: {busy}", file=sys.stderr)
        measure = source.record_ops(profile, fine, model, devices, timing)
        if busy:
            for info in profile.devices.values():
                info["note"] = busy
    real = list(profile.devices)[: len(devices)]
    fitting = measure is not None and len(real) >= 2 and fit > 0
    if fitting:  # before modeled devices copy the host's times
        whole = {name: measure({nm: name for nm in fine.names}) for name in real[:2]}
        calibrate_compute(fine, profile, {k: m.latency_s for k, m in whole.items() if m.ok})
    host = next(iter(profile.devices), None)  # the first measured device
    for name in modeled:
        add_modeled_device(profile, fine, name, relative_to=host)
    if fitting:
        placements = split_placements(fine.num_nodes, 2, fit)
        measured, kept = [], []
        steps = track(placements, description="fitting link costs", disable=not progress,
                      transient=True)
        for p in steps:
            m = measure({nm: real[int(d)] for nm, d in zip(fine.names, p)})
            if m.ok:
                measured.append(m.latency_s)
                kept.append(p)
        if len(kept) >= 3:
            fit_link_costs(fine, profile, kept, measured)
            profile.fit["devices"] = real[:2]
    return profile
