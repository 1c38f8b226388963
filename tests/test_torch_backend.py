"""The torch backend, for real on this machine's CPU: ``cpu`` (float32) and ``cpu:bf16`` (the
same CPU computing in bfloat16, the stand-in for a second device).

The graph ``torch.export`` gives (tiny_cnn, a user's own ``py:`` module), split placements
run and checked against the unsplit model, a memory cap as a failed measurement,
Accelerate's ``device_map="auto"`` as the baseline, a torch profile driving the
simulator, training runs (HSDAG, and refit on a recorded torch profile), and bad input
answered in one sentence (Accelerate's map on GPT-2, ``apply --save`` and its reload:
tests/test_torch_placed.py).
No mocks: every figure is measured. ``cpu:bf16`` has no native bf16 here (15-30x slower
than ``cpu``), so the timing is cut to a warm-up and two single-run blocks.
"""
from __future__ import annotations

import json
import math
import operator
import textwrap
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from envs.base import TimingConfig
from envs.graph_backend import make_backend, parse_placement
from envs.pytorch.backend import TorchBackend
from envs.backends import build_graph
from hsdag_core.compgraph import GraphError, parse_input_shapes

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process

ROOT = Path(__file__).resolve().parents[1]
DEVICES = ["cpu", "cpu:bf16"]
#: a warm-up and two single-run blocks: enough to run and compare, fast on a slow bf16
TIMING = TimingConfig(warmup=1, repeats=2, precision=0, block=1, validate_outputs=True)
FAST = ["--warmup", "1", "--repeats", "2", "--precision", "0", "--block", "1"]


@pytest.fixture(scope="module")
def tiny():
    """tiny_cnn's torch program and its placement graph."""
    program, graph, _, _ = build_graph("tiny_cnn", "none", None, "torch")
    return program, graph


@pytest.fixture(scope="module")
def backend(tiny):
    program, graph = tiny
    return TorchBackend(graph, program, DEVICES, TIMING)


def device_changes(graph, placement) -> int:
    """Stage boundaries as the simulator counts them: device changes in graph order."""
    devs = [placement[n] for n in graph.names]
    return sum(a != b for a, b in zip(devs, devs[1:]))


def compute_fx_nodes(gm) -> list:
    return [n for n in gm.graph.nodes
            if n.op not in ("placeholder", "get_attr", "output") and n.target is not operator.getitem]


# ----------------------------------------------------------------------------- the graph
def test_tiny_cnn_graph_nodes_ops_and_edges(tiny):
    program, graph = tiny
    # a stem, three blocks of two convolutions, a mean and a linear head
    assert graph.num_nodes == 19
    assert Counter(n.op_type for n in graph.nodes) == {
        "Convolution": 7, "Relu": 7, "Add": 3, "ReduceMean": 1, "MatMul": 1}
    # every fx node that computes is in exactly one graph node's ops, and nothing else is
    # counted twice either (parameters and inputs go with their first consumer)
    owners = Counter(op for n in graph.nodes for op in n.ops)
    assert all(c == 1 for c in owners.values())
    assert set(owners) == {n.name for n in program.gm.graph.nodes}
    for fx in compute_fx_nodes(program.gm):
        assert owners[fx.name] == 1, fx.name
    # the weights: all 7 convolutions and the head, in float32
    assert sum(n.weight_bytes for n in graph.nodes) == pytest.approx(program.parameter_bytes())
    assert all((n.weight_bytes > 0) == (n.op_type in ("Convolution", "MatMul")) for n in graph.nodes)
    # edges go forward in graph order, and every node but the first reads another
    assert graph.edges and all(e.src < e.dst for e in graph.edges)
    assert {e.dst for e in graph.edges} == set(range(1, graph.num_nodes))
    assert all(n.flops > 0 for n in graph.nodes)


def _user_module(tmp_path, name: str, with_example: bool) -> str:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(f"""
        import torch
        from torch import nn

        def make():
            torch.manual_seed(0)
            net = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4), nn.Softmax(-1))
            return {"(net, (torch.randn(2, 8),))" if with_example else "net"}
        """))
    return f"py:{name}:make"


def test_user_module_with_input_shape(tmp_path, monkeypatch, capsys):
    from hsdag_ray.measure import main as measure

    monkeypatch.syspath_prepend(str(tmp_path))
    spec = _user_module(tmp_path, "tb_user_mlp", with_example=False)
    _, graph, _, _ = build_graph(spec, "none", parse_input_shapes("2,8"), "torch")
    assert [n.op_type for n in graph.nodes] == ["MatMul", "Gelu", "MatMul", "Softmax"]
    assert graph.nodes[0].output_shapes == [[2, 16]]
    assert [(e.src, e.dst) for e in graph.edges] == [(0, 1), (1, 2), (2, 3)]
    # without its input shape it cannot be exported: one sentence saying what to give
    with pytest.raises(GraphError, match="--input-shape"):
        build_graph(spec, "none", None, "torch")
    # the command line measures it split over both devices, checking the outputs
    assert measure(["--backend", "torch", "--model", spec, "--input-shape", "2,8",
                    "--devices", "cpu,cpu:bf16", "--placement", "split:0.5", "--validate", *FAST]) == 0
    assert "2 stage(s)" in capsys.readouterr().out
    # a factory giving its own example inputs needs no shape
    spec2 = _user_module(tmp_path, "tb_user_mlp_ex", with_example=True)
    program, graph2, _, _ = build_graph(spec2, "none", None, "torch")
    assert graph2.num_nodes == 4 and list(program.example_inputs[0].shape) == [2, 8]


# ------------------------------------------------------------------ split execution
def test_placements_run_split_and_match_the_unsplit_model(tiny, backend):
    program, graph = tiny
    cases = {"all:cpu": parse_placement("all:cpu", graph, DEVICES),
             "split:0.5": parse_placement("split:0.5", graph, DEVICES),
             "random:3": parse_placement("random:3", graph, DEVICES)}
    assert device_changes(graph, cases["random:3"]) >= 3  # a real interleaving
    for name, placement in cases.items():
        m = backend.measure(placement)
        assert m.ok, (name, m.error)
        assert m.latency_s > 0 and math.isfinite(m.latency_s)
        # validated against the unsplit float32 program, within the bf16 tolerance where used
        tol = 8e-2 if "cpu:bf16" in placement.values() else 1e-3
        assert m.info["output_error"] <= tol, name
        assert m.info["stages"] == 1 + device_changes(graph, placement), name
        assert m.info["devices"] == [d for d in DEVICES if d in placement.values()]
    # f32 alone is exact; a bf16 part really computes in bf16 (not exactly the f32 outputs)
    assert backend.measure(cases["all:cpu"]).info["output_error"] < 1e-5
    assert backend.measure(cases["split:0.5"]).info["output_error"] > 1e-5


def test_a_cpu_device_of_its_own_threads_runs_its_stages_on_them(tiny):
    """``cpu:threads=1``: float32 like ``cpu`` (so exact), its stages on one intra-op
    thread and the rest on the process's; a stand-in whose speed does not depend on a
    native bfloat16 unit."""
    import torch

    from envs.pytorch.devices import parse_device

    dev = parse_device("cpu:threads=1:mem=1GB")
    assert (dev.name, dev.threads, dev.dtype, dev.mem_bytes) == ("cpu:threads=1", 1, "float32", 1e9)
    assert "on 1 thread" in dev.describe()
    for bad in ("cpu:threads=0", "cpu:threads=x", "cuda:0:threads=1"):
        with pytest.raises(ValueError):
            parse_device(bad)
    program, graph = tiny
    backend = TorchBackend(graph, program, ["cpu", "cpu:threads=1"], TIMING)
    seen: list[int] = []
    split = parse_placement("split:0.5", graph, ["cpu", "cpu:threads=1"])
    m = backend.measure(split)
    assert m.ok, m.error
    assert m.info["output_error"] < 1e-5 and m.info["stages"] == 1 + device_changes(graph, split)
    # the stage of cpu:threads=1 runs on one thread, and the process's count comes back
    from envs.pytorch.stages import OnDevice

    before = torch.get_num_threads()
    stage = OnDevice(torch.nn.Identity(), dev)
    stage.stage = torch.nn.Module()
    stage.stage.forward = lambda x: seen.append(torch.get_num_threads()) or x
    try:
        torch.set_num_threads(3)
        stage(torch.ones(2))
        assert seen == [1] and torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


def test_an_unknown_device_is_a_failed_measurement(tiny, backend):
    _, graph = tiny
    m = backend.measure({n: "cuda:3" for n in graph.names})
    assert not m.ok and m.stage == "validate" and "cuda:3" in m.error


# ---------------------------------------------------------------- out of memory
def test_a_memory_cap_refuses_weights_over_it(tiny):
    program, graph = tiny
    capped = TorchBackend(graph, program, ["cpu", "cpu:bf16:mem=1KB"], TIMING)
    assert capped.devices == DEVICES  # the cap is not part of the name
    for text in ("all:cpu:bf16", "split:0.5"):
        m = capped.measure(parse_placement(text, graph, DEVICES))
        assert m.ok is False and m.stage == "memory", text
        assert "cpu:bf16" in m.error
    # the ops without weights (ReLUs, adds, the mean) on the capped device: under the cap
    light = {n.name: "cpu:bf16" if n.weight_bytes == 0 else "cpu" for n in graph.nodes}
    m = capped.measure(light)
    assert m.ok, m.error
    assert m.info["stages"] == 1 + device_changes(graph, light) > 10


def test_a_capped_device_lets_go_of_an_evicted_placements_weights_at_once(tiny):
    """A placed program is an fx module in reference cycles: the copies a placement put on a
    capped device must go when the next placement replaces it, not when the garbage
    collector runs (on a capped GPU they would fill the cap beside the next placement's)."""
    import gc
    import weakref

    program, graph = tiny
    one_built = TimingConfig(warmup=1, repeats=2, precision=0, block=1, stage_cache=1)
    capped = TorchBackend(graph, program, ["cpu", "cpu:bf16:mem=1GB"], one_built)
    assert capped.measure(parse_placement("all:cpu:bf16", graph, DEVICES)).ok
    copies = [weakref.ref(t) for (_, dev), t in capped.cache._copies.items() if dev == "cpu:bf16"]
    assert copies
    gc.collect()
    gc.disable()
    try:
        assert capped.measure(parse_placement("all:cpu", graph, DEVICES)).ok
        alive = sum(ref() is not None for ref in copies)
    finally:
        gc.enable()
    assert alive == 0, f"{alive} of {len(copies)} copies on the capped device outlived their placement"


def test_placements_that_share_stages_build_only_their_new_ones(tiny):
    """A stage depends on its node set alone: the next placement of a local search reuses
    the stages it shares with earlier ones (outputs still checked), except on a capped
    device, whose stages leave with their placement."""
    program, graph = tiny
    backend = TorchBackend(graph, program, DEVICES, TIMING)
    names = graph.names
    half = len(names) // 2
    first = {n: "cpu" if i < half else "cpu:bf16" for i, n in enumerate(names)}
    second = {**first, names[-1]: "cpu"}  # the last node moves: the first stage is unchanged
    for placement in (first, second):
        m = backend.measure(placement)
        assert m.ok and m.info["output_error"] <= 8e-2, m.error
    assert backend.stages.hits == 1 and backend.stages.misses == 2 + 2
    capped = TorchBackend(graph, program, ["cpu", "cpu:bf16:mem=1GB"], TIMING)
    for placement in (first, second):
        assert capped.measure(placement).ok
    assert capped.stages.hits == 1 and capped.stages.misses == 1 + 1  # the cpu stage alone


# --------------------------------------------------------------- Accelerate's map
def test_own_baselines(tiny, backend):
    program, graph = tiny
    own = backend.own_baselines()
    assert list(own) == ["accelerate_auto"]
    acc = own["accelerate_auto"]
    assert isinstance(acc, np.ndarray) and acc.shape == (graph.num_nodes,)
    assert set(acc.tolist()) <= {0, 1}
    # uncapped, Accelerate fills the accelerator (the device that is not the f32 CPU) first
    assert (acc == 1).all()
    # a model that fits no device: the reason, not a placement
    tight = TorchBackend(graph, program, ["cpu:mem=1KB", "cpu:bf16:mem=1KB"], TIMING)
    why = tight.own_baselines()["accelerate_auto"]
    assert isinstance(why, str) and "does not fit" in why


# ------------------------------------------------------------------ a torch profile
def test_torch_profile_drives_the_simulator(tiny, backend):
    from envs.profiling import record
    from envs.simulator import Simulator
    from hsdag_core.device_profile import Profile, cost_graph

    program, graph = tiny
    prof = record("tiny_cnn", DEVICES, backend="torch", fit=4, progress=False,
                  timing=TimingConfig(warmup=1, repeats=3, precision=0, block=1))
    assert prof.source == "torch"
    assert list(prof.devices) == DEVICES
    for dev in DEVICES:
        times = prof.op_time_s[dev]
        assert all(times.get(fx.name, 0) > 0 for fx in compute_fx_nodes(program.gm)), dev
    # which device is faster depends on the CPU (native bf16 or not); the simulator follows
    # the profile either way
    total = {dev: sum(prof.op_time_s[dev].values()) for dev in DEVICES}
    faster, slower = sorted(DEVICES, key=total.get)
    assert prof.fit and prof.fit["placements"] >= 3 and prof.fit["devices"] == DEVICES
    # it survives a save, and the simulator measures the torch graph on it
    prof = Profile.from_json(json.loads(json.dumps(prof.to_json())))
    sim = make_backend("simulator", graph, profile=prof)
    placement = parse_placement("random:3", graph, DEVICES)
    m = sim.measure(placement)
    assert m.ok and m.latency_s > 0
    assert sim.measure(parse_placement(f"all:{faster}", graph, DEVICES)).latency_s < \
        sim.measure(parse_placement(f"all:{slower}", graph, DEVICES)).latency_s
    # the simulator's stage count is the real backend's
    arr = np.array([DEVICES.index(placement[n]) for n in graph.names])
    stages = Simulator(cost_graph(graph, prof)).sequential(arr).breakdown["stages"]
    assert stages == backend.measure(placement).info["stages"]


# -------------------------------------------------------------------- training runs
def _train(tmp_path, name: str, *extra: str) -> dict:
    from hsdag_ray.train import main as train_main

    assert train_main(["--backend", "torch", "--devices", "cpu,cpu:bf16", "--model", "tiny_cnn",
                       "--budget", "40", "--wandb", "disabled", "--out", str(tmp_path), "--name", name,
                       "--remeasure-rounds", "1", "--repeats", "3", "--precision", "0", *extra]) == 0
    run = tmp_path / name
    for f in ("summary.json", "metrics.jsonl", "best_placement.json", "store.json"):
        assert (run / f).is_file(), f
    summary = json.loads((run / "summary.json").read_text())
    assert summary["backend"] == "torch" and summary["devices"] == DEVICES
    # the run's table names Accelerate's map and the CPU alone, both measured
    assert {"accelerate_auto", "cpu_only", "cpu:bf16_only"} <= set(summary["baselines"])
    assert math.isfinite(summary["baselines"]["accelerate_auto"])
    assert math.isfinite(summary["baselines"]["cpu_only"])
    assert math.isfinite(summary["best_latency_s"]) and summary["best_latency_s"] > 0
    best = json.loads((run / "best_placement.json").read_text())
    assert best and set(best.values()) <= set(DEVICES)
    return summary


@pytest.mark.slow
def test_train_hsdag_on_the_torch_backend(tmp_path):
    summary = _train(tmp_path, "hsdag", "--method", "hsdag")
    assert summary["method"] == "hsdag" and summary["placements"] >= 40


@pytest.mark.slow
def test_train_refit_on_a_recorded_torch_profile(tmp_path):
    from hsdag_core.device_profile import Profile
    from hsdag_ray.profile import main as profile_main

    prof = tmp_path / "tiny_torch.json"
    assert profile_main(["--backend", "torch", "--model", "tiny_cnn", "--devices", "cpu,cpu:bf16",
                         "--out", str(prof), "--fit", "4", *FAST]) == 0
    assert Profile.load(prof).source == "torch"
    summary = _train(tmp_path, "refit", "--method", "refit", "--profile", str(prof))
    assert summary["method"] == "refit"


@pytest.mark.slow
def test_train_for_throughput_on_the_torch_backend(tmp_path, capsys):
    """--objective throughput: every placement and baseline is a pipeline's measured time
    per sample, and the run says so."""
    summary = _train(tmp_path, "thr", "--method", "random", "--objective", "throughput")
    assert summary["objective"] == "throughput"
    assert "time per sample" in capsys.readouterr().out


# ----------------------------------------------------------------------- bad input
@pytest.mark.parametrize("prog,argv,words", [
    ("hsdag_ray.train", ["--backend", "torch", "--devices", "cpu,cuda:0", "--model", "tiny_cnn",
                         "--wandb", "disabled"], ["cuda:0 is not here"]),
    ("hsdag_ray.measure", ["--backend", "torch", "--devices", "cpu,cuda:0", "--model", "tiny_cnn"],
     ["cuda:0 is not here"]),
    ("hsdag_ray.apply", ["--backend", "torch", "--devices", "cpu,cuda:0", "--model", "tiny_cnn",
                         "--placement", "split:0.5"], ["cuda:0 is not here"]),
    ("hsdag_ray.measure", ["--backend", "torch", "--model", "gen:layered:n=3:c=16:w=1:seed=0"],
     ["generated OpenVINO graph"]),
    ("hsdag_ray.apply", ["--backend", "torch", "--model", "model.xml", "--placement", "split:0.5"],
     ["OpenVINO/ONNX file"]),
    ("hsdag_ray.measure", ["--backend", "torch", "--devices", "cpu,cpu:int3", "--model", "tiny_cnn"],
     ["cpu:int3"]),
    ("hsdag_ray.measure", ["--backend", "torch", "--objective", "parallel", "--model", "tiny_cnn"],
     ["sequential or throughput", "--backend simulator"]),
])
def test_bad_input_exits_2_with_one_sentence(prog, argv, words, tmp_path, monkeypatch, capsys):
    import importlib

    from hsdag_ray.cli import run

    monkeypatch.chdir(tmp_path)
    main = importlib.import_module(prog).main
    assert run(main, argv, prog=prog) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.strip().splitlines() if ln.strip() and "warn" not in ln.lower()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert all(w in lines[0] for w in words), lines[0]
