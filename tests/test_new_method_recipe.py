"""architecture.md's "A new method" recipe, followed: a search of its own (this file is its
module) registered in one ``register(Method(...))`` line; ``train --method``, its
``--help``, the in-process runner and a sweep's method check pick it up from the
registry, no command knowing its name."""
import json
from typing import Any, Optional

import numpy as np
import pytest

from policies.registry import METHODS, Method, register


class SplitPoints:
    """Every split of the node order in two: the first ``k`` nodes on the last device, the
    rest on the first, for k = 0, 1, ... (then again from 0)."""

    def __init__(self, num_nodes: int, num_devices: int, budget: int, seed: int = 0,
                 start: Optional[np.ndarray] = None) -> None:
        self.n, self.d, self.k = num_nodes, num_devices, 0
        self.seen: list[tuple[int, float]] = []

    def propose(self) -> np.ndarray:
        p = np.zeros(self.n, dtype=np.int64)
        p[: self.k % (self.n + 1)] = self.d - 1
        self.k += 1
        return p

    def observe(self, placement: np.ndarray, latency_s: float) -> None:
        self.seen.append((int((np.asarray(placement) > 0).sum()), latency_s))

    def state_dict(self) -> dict[str, Any]:
        return {"k": self.k}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.k = state["k"]


@pytest.fixture
def split_points():
    register(Method(name="split-points", approach="search", run=f"{__name__}:SplitPoints", description="every split of the node order in two"))  # noqa: E501 - the recipe's one line
    yield METHODS["split-points"]
    del METHODS["split-points"]


def test_the_help_lists_it(split_points, capsys):
    from hsdag_ray.cli import run
    from hsdag_ray.train import main

    with pytest.raises(SystemExit):
        run(main, ["--help"], prog="hsdag_ray.train")
    assert "split-points" in capsys.readouterr().out


@pytest.mark.ray
def test_train_runs_it(split_points, tmp_path, tiny_profile_file):
    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.training import train

    cfg = TrainConfig.of(model="tiny_cnn", method="split-points", backend="simulator",
                         profile=str(tiny_profile_file), budget=12, env_runners=0,
                         wandb="disabled", out=str(tmp_path), name="split", seed=0, coarsen="none")
    s = train(cfg, quiet=True)
    assert s["method"] == "split-points" and s["measurements"] >= 1
    state = json.loads((tmp_path / "split" / "state.json").read_text())
    lat = [x for x in state["latencies"] if x is not None]
    # the first proposal is every node on the first device: the CPU alone
    assert lat[0] == pytest.approx(s["baselines"]["CPU_MODEL_only"], rel=1e-9)
    assert s["method_best_latency_s"] == pytest.approx(min(lat))
    assert s["baselines"]["optimum"] <= s["best_latency_s"] * (1 + 1e-9)


def test_the_in_process_runner_runs_it(split_points):
    from envs.graph_backend import make_backend
    from hsdag_core.device_profile import cost_graph
    from hsdag_ray.run.inprocess import run_method
    from test_inprocess import crossed_profile, layered_cnn

    graph = layered_cnn(6, c=16, size=16)
    prof = crossed_profile(graph)
    backend = make_backend("simulator", graph, profile=prof)
    costs = cost_graph(graph, prof, backend.devices)
    r = run_method("split-points", graph, backend, costs, budget=6, seed=0,
                   say=lambda _: None, progress=False)
    assert r["approach"] == "search" and r["measured"] == len(r["curve"]) <= 6
    assert r["latency_s"] == min(r["curve"]) and r["failures"] == 0


def test_a_sweeps_grid_takes_it(split_points, tmp_path, tiny_profile_file):
    from hsdag_ray.cli import UsageError
    from hsdag_ray.run.sweeping import SweepConfig, _check

    def grid(methods):
        return _check(SweepConfig(models=["tiny_cnn"], methods=methods, seeds=[0, 1], budget=10,
                                  train={"backend": "simulator", "profile": str(tiny_profile_file)},
                                  out=str(tmp_path)))

    assert sorted((t["method"], t["seed"]) for t in grid(["split-points", "random"])) == [
        ("random", 0), ("random", 1), ("split-points", 0), ("split-points", 1)]
    with pytest.raises(UsageError, match="unknown method 'split-point'"):
        grid(["split-point"])
