"""A run for the parallel objective, which no exact solver applies to, is compared with
HEFT's placement on its profile, measured like every baseline."""
import dataclasses
import json

import numpy as np
import pytest

from hsdag_ray.run.config import TrainConfig
from hsdag_ray.run.training import train

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process


def _profiles(tmp_path):
    """Two modeled profiles of tiny_cnn: the one the run knows, and the machine's, whose
    accelerator has 50x the per-op overhead, so HEFT solves them differently."""
    from hsdag_core.coarsening import build_graph
    from hsdag_core.device_profile import MODELED_DEVICES, Profile, add_modeled_device

    _, fine, _, _ = build_graph("tiny_cnn", "none")
    paths = {}
    for name, overhead in (("known", 1e-5), ("machine", 5e-4)):
        prof = Profile("tiny_cnn", {}, {})
        add_modeled_device(prof, fine, "CPU_MODEL")
        add_modeled_device(prof, fine, "GPU_X", dataclasses.replace(MODELED_DEVICES["GPU_MODEL"],
                                                                      op_overhead_s=overhead))
        prof.boundary_s = 1e-5
        prof.save(tmp_path / f"{name}.json")
        paths[name] = tmp_path / f"{name}.json"
    return paths


def _heft(path, coarsen="colocation"):
    """HEFT on the profile at ``path``: (placement, its parallel latency there, the cost graph)."""
    from envs.simulator import Simulator
    from hsdag_core.coarsening import build_graph
    from hsdag_core.device_profile import Profile, cost_graph
    from policies.solvers.exact import solve

    _, _, graph, _ = build_graph("tiny_cnn", coarsen)
    cg = cost_graph(graph, Profile.load(path), ["CPU_MODEL", "GPU_X"])
    res = solve(cg, "parallel", "heft")
    return np.asarray(res.placement), res.value, cg


@pytest.mark.slow
def test_parallel_runs_measure_heft_on_their_profile(tmp_path):
    from envs.simulator import Simulator
    from hsdag_ray.run.results import baseline_rows, rows_from_summary

    paths = _profiles(tmp_path)
    placement, value, _ = _heft(paths["known"])
    _, _, machine = _heft(paths["machine"])
    on_machine = Simulator(machine).evaluate(placement, "parallel").value
    assert on_machine > 1.5 * value  # the machine's overheads make the profile's plan slower
    runs = {}
    for name, extra in (("known", {}), ("wrong", {"sim_profile": str(paths["machine"])})):
        cfg = TrainConfig.of(model="tiny_cnn", method="anneal", backend="simulator",
                          objective="parallel", profile=str(paths["known"]), budget=20,
                          episode_len=5, env_runners=0, wandb="disabled", out=str(tmp_path),
                          name=name, seed=0, **extra)
        s = runs[name] = train(cfg, quiet=True)
        b = s["baselines"]
        assert "optimum" not in b and set(b) == {"CPU_MODEL_only", "GPU_X_only", "heft"}
        state = json.loads((tmp_path / name / "state.json").read_text())["baselines"]
        # solved on the profile the run knows, measured on the (simulated) machine
        assert state["candidates"]["heft"] == placement.tolist()
        assert b["heft"] == pytest.approx(value if name == "known" else on_machine)
        assert s["best_latency_s"] <= b["heft"] * (1 + 1e-9)
    # the comparison tables carry it as a baseline row
    rows = baseline_rows([rows_from_summary(runs["known"])], [runs["known"]])
    assert any(r["method"] == "heft" and r["best_latency_s"] == pytest.approx(value) for r in rows)


@pytest.mark.parametrize("method", ["anneal", "hsdag"])
def test_exact_start_on_the_parallel_objective_starts_from_heft(method, tmp_path):
    """--exact-start: with no exact solver, HEFT's placement on the run's profile is the
    run's first measurement, counted as its own, and the method samples around it."""
    from envs.store import placement_key

    paths = _profiles(tmp_path)
    placement, _, _ = _heft(paths["known"])
    cfg = TrainConfig.of(model="tiny_cnn", method=method, backend="simulator", objective="parallel",
                      profile=str(paths["known"]), sim_profile=str(paths["machine"]),
                      exact_start="on", budget=10, budget_unit="measurements", episode_len=5,
                      env_runners=0, wandb="disabled", out=str(tmp_path), name=method, seed=0)
    s = train(cfg, quiet=True)
    log = json.loads((tmp_path / method / "store.json").read_text())["log"]
    assert log[0]["key"].split(":")[-1] == placement_key("", placement)[1:]
    assert s["exact_start"] and s["measurements"] >= 10
    assert s["method_best_latency_s"] <= s["baselines"]["heft"] * (1 + 1e-9)


def test_sequential_runs_keep_the_exact_optimum_and_no_heft(tmp_path):
    paths = _profiles(tmp_path)
    cfg = TrainConfig.of(model="tiny_cnn", method="random", backend="simulator",
                      profile=str(paths["known"]), budget=5, episode_len=5, env_runners=0,
                      wandb="disabled", out=str(tmp_path), name="seq", seed=0)
    b = train(cfg, quiet=True)["baselines"]
    assert "optimum" in b and "heft" not in b
