"""Measuring placements of a placement graph, on any backend.

A placement here maps every *node* of a :class:`~hsdag_core.compgraph.CompGraph`
to a device. :func:`make_backend` returns a :class:`~envs.base.Backend` that
takes such placements and measures them with the backend registered under that name (real
OpenVINO, :mod:`envs.openvino.node_backend`; PyTorch; the simulator on a profile); the caller
never needs to know which.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from envs.backends import BACKENDS, build
from envs.base import Backend, TimingConfig
from hsdag_core.compgraph import CompGraph, GraphError

__all__ = ["BACKENDS", "make_backend", "simulator_backend", "parse_placement"]


def make_backend(name: str, graph: CompGraph, model=None, devices: Sequence[str] = (),
                 timing: TimingConfig = TimingConfig(), profile=None,
                 objective: str = "sequential", sim_delay_s: float = 0.0) -> Backend:
    """A backend measuring node placements of ``graph``: the one registered as ``name``
    (:data:`envs.backends.BACKENDS`). The OpenVINO ones need the ``model`` and real
    ``devices``; the simulator needs a :class:`~hsdag_core.device_profile.Profile`
    (``devices`` then selects among its devices, all of them by default; ``sim_delay_s``
    > 0 makes every simulated measurement take that long, see
    :class:`envs.simulator.TimedSimulatorBackend`)."""
    if name not in BACKENDS:
        raise GraphError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    return build(name, graph, model=model, devices=devices, timing=timing, profile=profile,
                 objective=objective, sim_delay_s=sim_delay_s)


def simulator_backend(graph: CompGraph, *, profile=None, devices: Sequence[str] = (),
                      objective: str = "sequential", sim_delay_s: float = 0.0, **_) -> Backend:
    """The simulator on ``profile``'s costs of ``graph`` (registered as ``simulator``)."""
    from envs.simulator import SimulatorBackend, TimedSimulatorBackend
    from hsdag_core.device_profile import cost_graph

    if profile is None:
        raise GraphError("the simulator backend needs a profile (--profile FILE); "
                         "record one with python -m hsdag_ray.profile")
    cg = cost_graph(graph, profile, list(devices) or None)
    if sim_delay_s > 0:
        return TimedSimulatorBackend(cg, objective, sim_delay_s)
    return SimulatorBackend(cg, objective)


def parse_placement(text: str, graph: CompGraph, devices: Sequence[str]) -> dict[str, str]:
    """A node placement from a shorthand or a JSON file.

    Shorthands: ``all:DEVICE``; ``split:F`` (the first fraction ``F`` of the
    nodes in topological order on the first device, the rest on the second);
    ``random:SEED`` (each node on a random device). Otherwise ``text`` is a
    JSON file mapping OpenVINO op names (all ops, or at least one op of every
    node) to devices, as written by ``hsdag_ray.train`` and ``hsdag_ray.solve``.
    """
    from pathlib import Path
    import json

    names = graph.names
    devices = list(devices)
    if text.startswith("all:"):
        dev = text[4:]
        placement = {nm: dev for nm in names}
    elif text.startswith("split:"):
        if len(set(devices)) < 2:
            raise GraphError(f"{text} splits the model over two devices, and --devices names only "
                             f"{', '.join(devices) or 'none'}; add a second device or use all:DEVICE")
        try:
            frac = float(text[6:])
        except ValueError:
            raise GraphError(f"cannot read {text!r}; write split:0.5") from None
        if not 0.0 < frac < 1.0:
            raise GraphError(f"{text!r}: the fraction F of split:F must lie strictly between 0 "
                             "and 1 (e.g. split:0.5); use all:DEVICE for one device")
        cut = int(round(frac * len(names)))
        placement = {nm: devices[0] if i < cut else devices[1] for i, nm in enumerate(names)}
    elif text.startswith("random:"):
        if len(set(devices)) < 2:
            raise GraphError(f"{text} places each node on a random one of two or more devices, and "
                             f"--devices names only {', '.join(devices) or 'none'}; add a second "
                             "device or use all:DEVICE")
        try:
            rng = np.random.default_rng(int(text[7:]))
        except ValueError:
            raise GraphError(f"cannot read {text!r}; write random:SEED with an integer seed") from None
        placement = {nm: devices[int(k)] for nm, k in zip(names, rng.integers(0, len(devices), len(names)))}
    else:
        path = Path(text)
        if not path.is_file():
            raise GraphError(f"placement {text!r} is neither a file nor all:DEVICE, split:F or random:SEED")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise GraphError(f"placement file {text} is not valid JSON ({e.msg})") from None
        if isinstance(data, dict) and "placement" in data and isinstance(data["placement"], dict):
            data = data["placement"]
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise GraphError(f"placement file {text} must map op names to device names")
        # a misspelt device is named before a node it splits (some of its ops on the device)
        ours = [dev for op, dev in data.items() if op in graph.op_to_node]
        unknown = [dev for dev in dict.fromkeys(ours) if dev not in devices]
        if unknown:
            raise GraphError(_unknown_device(f"{text} places {ours.count(unknown[0])} op(s)",
                                             unknown[0], devices))
        try:
            placement = graph.placement_from_ops(data)
        except GraphError as e:  # another model's ops, a node left out or split
            raise GraphError(f"placement file {text}: {e}") from None
    unknown = sorted(set(placement.values()) - set(devices))
    if unknown:
        count = sum(1 for d in placement.values() if d == unknown[0])
        raise GraphError(_unknown_device(f"the placement {text} puts {count} node(s)", unknown[0],
                                         devices))
    return placement


def _unknown_device(what: str, device: str, devices: Sequence[str]) -> str:
    """``what`` on ``device``, not one of ``devices``: one sentence with the closest name."""
    import difflib
    import re

    upper = {d.upper(): d for d in devices}
    close = [upper[c] for c in difflib.get_close_matches(device.upper(), list(upper), n=1, cutoff=0.6)]
    stem = re.match(r"[A-Za-z]*", device).group(0).upper()  # GPU0 -> GPU: GPU_MODEL
    if not close and len(stem) >= 2:
        close = [d for d in devices if d.upper().startswith(stem)][:1]
    hint = (f"did you mean {close[0]}, or does --devices lack {device}?" if close else
            f"fix the placement or add {device} to --devices")
    return (f"{what} on {device!r}, which is not one of the run's devices {', '.join(devices)}; "
            + hint)
