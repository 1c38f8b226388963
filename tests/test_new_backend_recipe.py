"""architecture.md's "A new backend" recipe, followed: a toy backend with its own graph source
(a chain of nodes) and a cost model of its own, its package being this file, registered in
one line; ``profile``'s recording, ``measure``, ``train --backend toy`` and ``apply`` (its
save and load) run on it through the hooks of its kind, no command knowing its name."""
import json
from pathlib import Path

import numpy as np
import pytest

from envs.backends import BACKENDS, BackendKind, register
from envs.base import Backend, Measurement
from envs.deploy import SaveError, result_head, row, versus
from envs.source import GraphSource
from hsdag_core.compgraph import CompGraph, Edge, Node

#: the toy's devices: units of work per millisecond
SPEEDS = {"slow": 1.0, "fast": 3.0}
#: what a tensor crossing from one device to the other costs
LINK_S = 2e-4


def chain(spec: str) -> CompGraph:
    """``toy:N``: N nodes in a chain, node i doing i+1 units of work."""
    n = int(spec.split(":")[1])
    nodes = [Node(f"n{i}", "Work", [f"n{i}"], flops=float(i + 1)) for i in range(n)]
    edges = [Edge(i, i + 1, 0, [1], "f32", 4.0) for i in range(n - 1)]
    return CompGraph(spec.replace(":", "_"), nodes, edges)


def node_s(graph: CompGraph, device: str) -> list[float]:
    return [n.flops / SPEEDS[device] * 1e-3 for n in graph.nodes]


class ToyBackend(Backend):
    """The toy's cost model: each node's work at its device's speed, plus the link per
    edge between two devices."""

    simulated = True

    def __init__(self, graph: CompGraph, devices) -> None:
        self.graph, self.devices, self.name = graph, list(devices), "toy"
        self.times = np.array([node_s(graph, d) for d in self.devices])  # [device, node]

    def measure(self, placement, race=False):
        return self.measure_array(np.array([self.devices.index(placement[n]) for n in self.graph.names]))

    def measure_array(self, placement, race=False):
        p = np.asarray(placement, dtype=np.int64)
        cut = sum(1 for e in self.graph.edges if p[e.src] != p[e.dst])
        t = float(self.times[p, np.arange(len(p))].sum()) + cut * LINK_S
        return Measurement(ok=True, latency_s=t, backend=self.name, samples_s=[t], runs=1,
                           info={"path": "toy", "stages": cut + 1})


def toy_backend(graph, *, devices=(), profile=None, **_):
    return ToyBackend(graph, list(devices) or profile.device_names)


class ToyPlaced:
    """A saved toy placement: it adds each node's work to its input, stage by stage."""

    def __init__(self, placement: dict[str, str]) -> None:
        self.placement = placement

    def __call__(self, x: float) -> float:
        return x + sum(int(name[1:]) + 1 for name in self.placement)


class ToySource(GraphSource):
    name, description = "toy", "the toy chain's"

    def load(self, model_spec, input_shapes=None):
        graph = chain(model_spec)
        return graph, graph, None

    def size(self, model) -> str:
        return f"{model.num_nodes} toy nodes"

    def check_devices(self, specs, threads=0, here=True):
        bad = [s for s in specs if s not in SPEEDS]
        if bad:
            raise ValueError(f"unknown toy device {bad[0]!r}; use {', '.join(SPEEDS)}")
        return list(specs)

    def describe_devices(self, specs, threads=0):
        return [f"{s}: a toy device, {SPEEDS[s]:g} units per ms" for s in specs]

    def record_ops(self, profile, fine, model, devices, timing):
        for d in devices:
            profile.devices[d] = {"kind": "measured", "description": self.describe_devices([d])[0]}
            profile.op_time_s[d] = dict(zip(fine.names, node_s(fine, d)))
        return ToyBackend(fine, devices).measure

    def apply(self, job):
        backend = ToyBackend(job.graph, job.names)
        placed = backend.measure(job.placement)
        placed.info.update(max_rel_error=0.0, tolerance=0.0)
        result = result_head(job, placed)
        result["single"] = {d: row(f"{d} only", backend.measure({n: d for n in job.placement}))
                            for d in job.names}
        for r in result["single"].values():
            versus(r, placed)
        if job.save:
            folder = Path(job.save)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "placed.json").write_text(json.dumps(
                {"format": "hsdag_ray.placed/1", "backend": self.name, "placement": job.placement}))
            from envs.open_saved import load_placed

            loaded = load_placed(folder)
            ok = loaded(1.0) == ToyPlaced(dict.fromkeys(job.graph.names))(1.0)
            if not ok:
                raise SaveError("the toy's saved placement adds up differently")
            result["saved"] = {"dir": str(folder.resolve()), "path": "toy", "stages": 0,
                               "max_abs_error": 0.0, "max_rel_error": 0.0, "tolerance": 0.0, "ok": ok}
        return result

    def load_placed(self, folder, manifest, threads):
        return ToyPlaced(manifest["placement"])


SOURCE = ToySource()


@pytest.fixture
def toy():
    register(BackendKind("toy", f"{__name__}:toy_backend", False, "a toy chain's cost model", source=f"{__name__}:SOURCE", applies=True))  # noqa: E501 - the recipe's one line
    yield BACKENDS["toy"]
    del BACKENDS["toy"]


@pytest.fixture
def toy_profile(toy, tmp_path):
    from envs.profiling import record

    # what python -m hsdag_ray.profile records, through the toy's source
    prof = record("toy:8", ["slow", "fast"], fit=0, progress=False, backend="toy")
    assert prof.source == "toy" and set(prof.devices) == {"slow", "fast"}
    path = tmp_path / "toy.json"
    prof.save(path)
    return path


def test_measure_runs_on_the_toy(toy_profile, capsys):
    from hsdag_ray.cli import run
    from hsdag_ray.measure import main

    assert run(main, ["--backend", "toy", "--model", "toy:8", "--profile", str(toy_profile),
                      "--placement", "split:0.5", "--json"], prog="hsdag_ray.measure") == 0
    out = json.loads(capsys.readouterr().out)
    graph = chain("toy:8")
    expected = sum(node_s(graph, "slow")[:4]) + sum(node_s(graph, "fast")[4:]) + LINK_S
    assert out["backend"] == "toy" and out["latency_s"] == pytest.approx(expected)
    assert run(main, ["--backend", "toy", "--model", "toy:8", "--profile", str(toy_profile),
                      "--placement", "all:nope"], prog="hsdag_ray.measure") == 2


@pytest.mark.ray
def test_train_runs_on_the_toy(toy_profile, tmp_path):
    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.training import train

    cfg = TrainConfig.of(model="toy:8", backend="toy", profile=str(toy_profile), method="random",
                         budget=12, env_runners=0, wandb="disabled", out=str(tmp_path), name="toy",
                         coarsen="none")
    s = train(cfg, quiet=True)
    assert s["backend"] == "toy" and s["devices"] == ["slow", "fast"]
    assert set(s["baselines"]) >= {"slow_only", "fast_only", "optimum"}
    # the toy's cost model is the profile's: the exact optimum is all on the fast device
    assert s["baselines"]["optimum"] == pytest.approx(s["baselines"]["fast_only"])
    assert s["best_latency_s"] <= s["baselines"]["slow_only"]
    best = json.loads((tmp_path / "toy" / "best_placement.json").read_text())
    assert set(best) == {f"n{i}" for i in range(8)}


def test_apply_runs_on_the_toy_and_saves_it(toy, tmp_path, capsys):
    from hsdag_ray.apply import main
    from hsdag_ray.cli import run

    save = tmp_path / "placed"
    assert run(main, ["--backend", "toy", "--model", "toy:6", "--devices", "slow,fast",
                      "--placement", "split:0.5", "--save", str(save), "--json"],
               prog="hsdag_ray.apply") == 0
    res = json.loads(capsys.readouterr().out)
    assert res["backend"] == "toy" and res["saved"]["ok"] and (save / "apply.json").is_file()
    assert set(res["single"]) == {"slow", "fast"}
    assert res["single"]["slow"]["placement_speedup"] > 1  # half on the fast device beats none
    from envs.open_saved import load_placed

    assert isinstance(load_placed(save), ToyPlaced)
    # a device the toy does not have: one sentence, exit 2
    assert run(main, ["--backend", "toy", "--model", "toy:6", "--devices", "slow,gpu",
                      "--placement", "split:0.5"], prog="hsdag_ray.apply") == 2
    assert "unknown toy device 'gpu'" in capsys.readouterr().err
