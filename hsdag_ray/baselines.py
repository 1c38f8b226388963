"""The figures a run is compared with: single devices, OpenVINO AUTO, the exact optimum."""
from __future__ import annotations

import math
from typing import Optional

__all__ = ["exact_method", "compute_baselines"]


def exact_method(graph, objective: str) -> Optional[str]:
    """The exact solver that applies to ``objective`` on ``graph``, if any."""
    import numpy as np

    if objective == "sequential":
        limited = bool(np.isfinite(graph.mem_capacity).any())
        return "mincut" if graph.num_devices == 2 and not limited else "milp"
    if objective == "throughput":
        return "milp"
    return None


def compute_baselines(env, objective: str, say, time_limit: float = 120.0) -> dict[str, float]:
    """Single-device latencies; with a real backend, OpenVINO AUTO's
    (``openvino_auto``: the whole model on the device AUTO picks); and, where an
    exact solver applies to the profile, the latency of its optimal placement
    (``optimum``), measured by the run's own backend (so on hardware with a
    real backend)."""
    from hsdag_ray.core.profile import Profile, cost_graph
    from policies.exact import solve

    baselines = {f"{d}_only": v for d, v in env.single_device_s.items()}
    if env.config.backend != "simulator":
        from envs.openvino_backend import measure_auto

        m = measure_auto(env.config.model, env.devices, env.config.timing)
        baselines["openvino_auto"] = m.latency_s if m.ok else math.inf
        ran_on = ",".join(m.info.get("execution_devices") or []) or "?"
        say(f"OpenVINO AUTO ({m.info.get('auto_device', 'AUTO')}, ran on {ran_on}): "
            + (f"{m.latency_s * 1e3:.3f} ms" if m.ok else f"failed: {m.error}"))
    if env.config.profile is None:
        return baselines
    prof = Profile.from_json(env.config.profile)
    if any(d not in prof.devices for d in env.devices):
        return baselines
    cg = cost_graph(env.graph, prof, env.devices)
    method = exact_method(cg, objective)
    if method is None:
        return baselines
    res = solve(cg, objective, method, time_limit=time_limit)
    if not res.feasible:
        say(f"exact solver {method}: {res.status}")
        return baselines
    m = env.measure_untracked(res.placement)
    baselines["optimum"] = m.latency_s if m.ok else math.inf
    gap = "" if res.optimal else f" (not proven optimal: gap {res.gap:.1%})"
    say(f"exact optimum on the profile ({method}): {res.value * 1e3:.3f} ms, measured "
        f"{baselines['optimum'] * 1e3:.3f} ms{gap}")
    return baselines
