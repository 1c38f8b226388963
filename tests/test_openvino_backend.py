"""Tests of the real OpenVINO backends on small models built with opset13.

Devices are ``CPU`` (the real CPU, plugin defaults: bf16 where the CPU has it)
and ``CPU_F32`` (a second CPU plugin instance with f32 inference precision).
Timing is kept short (1 warm-up run, 3 blocks of 2 runs) so the file runs in
well under a minute on 2 cores.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

import envs.openvino.backend as backend_module
import envs.timing as timing_module
from envs.base import Backend, TimingConfig
from envs.openvino.auto import AUTO_BACKEND, auto_candidates, measure_auto
from envs.openvino.backend import OpenVINOBackend
from envs.openvino.devices import DeviceSet, DeviceSpec, check_devices, find_plugin_library
from envs.openvino.stages import STRUCTURAL_OPS, complete_affinity, plan_stages, split_stages
from hsdag_core.models import load_model

FAST = TimingConfig(warmup=1, repeats=3, block=2, timeout_s=60.0, threads=1, precision=0)
CHECKED = TimingConfig(warmup=1, repeats=3, block=2, timeout_s=60.0, threads=1, validate_outputs=True, precision=0)
DEVICES = ["CPU", "CPU_F32"]


def conv_net(channels: int = 32, size: int = 48, blocks: int = 5, seed: int = 0) -> ov.Model:
    """A residual conv net: ``2 * blocks`` 3x3 convolutions with ReLU and Add, a
    global average pool and a MatMul head (about 0.4 ms in bf16, 2 ms in f32 on
    one thread). The second conv of the last block reuses the first block's
    weights, so one Constant feeds two ops far apart."""
    rng = np.random.default_rng(seed)

    def weights(shape: tuple[int, ...]) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    x = ops.parameter([1, channels, size, size], ov.Type.f32, name="x")
    first_weights = None
    h = x
    for b in range(blocks):
        w1 = ops.constant(weights((channels, channels, 3, 3)), name=f"b{b}_w1")
        w2 = ops.constant(weights((channels, channels, 3, 3)), name=f"b{b}_w2")
        if first_weights is None:
            first_weights = w1
        elif b == blocks - 1:
            w2 = first_weights
        a = ops.relu(ops.convolution(h, w1, [1, 1], [1, 1], [1, 1], [1, 1], name=f"b{b}_c1"), name=f"b{b}_r1")
        a = ops.convolution(a, w2, [1, 1], [1, 1], [1, 1], [1, 1], name=f"b{b}_c2")
        h = ops.relu(ops.add(a, h, name=f"b{b}_add"), name=f"b{b}_r2")
    axes = ops.constant(np.array([2, 3], np.int64), name="pool_axes")
    pooled = ops.reduce_mean(h, axes, False, name="pool")
    head = ops.constant(weights((channels, 10)), name="fc_w")
    logits = ops.matmul(pooled, head, False, False, name="fc")
    return ov.Model([ops.result(logits, name="logits")], [x], "conv_net")


def attention_net(seq: int = 16, dim: int = 32, seed: int = 0) -> ov.Model:
    """One self-attention layer whose output is reshaped with a ShapeOf of an
    intermediate tensor (the shape subgraph that makes HETERO fail when the
    Reshape sits on another device than its shape input)."""
    rng = np.random.default_rng(seed)
    x = ops.parameter([1, seq, dim], ov.Type.f32, name="x")

    def weight(name: str) -> ov.Node:
        return ops.constant((rng.standard_normal((dim, dim)) * 0.1).astype(np.float32), name=name)

    q = ops.matmul(x, weight("wq"), False, False, name="q")
    k = ops.matmul(x, weight("wk"), False, False, name="k")
    v = ops.matmul(x, weight("wv"), False, False, name="v")
    shape = ops.shape_of(q, name="q_shape")
    probs = ops.softmax(ops.matmul(q, k, False, True, name="scores"), -1, name="probs")
    out = ops.reshape(ops.matmul(probs, v, False, False, name="mix"), shape, False, name="reshape")
    out = ops.mvn(ops.add(x, out, name="residual"), ops.constant(np.array([-1], np.int64), name="ln_axes"),
                  True, 1e-5, "inside_sqrt", name="norm")
    return ov.Model([ops.result(out, name="out")], [x], "attention_net")


def op_names(model: ov.Model) -> list[str]:
    return [op.get_friendly_name() for op in model.get_ordered_ops()]


def compute_ops(model: ov.Model) -> list[str]:
    return [op.get_friendly_name() for op in model.get_ordered_ops()
            if op.get_type_name() not in STRUCTURAL_OPS]


def everything_on(model: ov.Model, device: str) -> dict[str, str]:
    return {name: device for name in op_names(model)}


def random_affinity(model: ov.Model, devices: list[str], seed: int) -> dict[str, str]:
    rng = np.random.default_rng(seed)
    return complete_affinity(model, {n: devices[rng.integers(len(devices))] for n in compute_ops(model)})


def halves(model: ov.Model, first: str, second: str) -> dict[str, str]:
    names = compute_ops(model)
    split = len(names) // 2
    return complete_affinity(model, {n: first if i < split else second for i, n in enumerate(names)})


@pytest.fixture(scope="module")
def net() -> ov.Model:
    return conv_net()


# ----------------------------------------------------------------------------- devices


def test_device_spec_forms() -> None:
    assert DeviceSpec.parse("CPU") == DeviceSpec("CPU", "CPU")
    assert DeviceSpec.parse("CPU_F32") == DeviceSpec("CPU_F32", "CPU", precision="f32")
    assert DeviceSpec.parse("CPU:threads=2") == DeviceSpec("CPU", "CPU", threads=2)
    spec = DeviceSpec.parse("CPU2=CPU:precision=bf16:threads=1")
    assert spec == DeviceSpec("CPU2", "CPU", precision="bf16", threads=1) and spec.virtual
    for bad in ("CPU2=CPU:precision=f8", "CPU2=CPU:threads=-1", "CPU2=CPU:color=red", "=CPU"):
        with pytest.raises(ValueError, match="CPU"):
            DeviceSpec.parse(bad)


def test_device_set_reports_real_and_virtual() -> None:
    devices = DeviceSet(["CPU", "CPU_F32", "CPU2=CPU:precision=f32:threads=1"], default_threads=1)
    assert devices.errors == [] and devices.names == ["CPU", "CPU_F32", "CPU2"]
    real, f32, second = (devices.info(n) for n in devices.names)
    assert not real.virtual and f32.virtual and second.virtual
    assert f32.precision == "f32" and f32.threads == 1 and real.threads == 1
    lines = devices.describe()
    assert "real device" in lines[0]
    assert "virtual device" in lines[1] and "same hardware as CPU" in lines[1]


def test_check_devices_names_the_problem() -> None:
    assert [d.name for d in check_devices(["CPU", "CPU_F32"])] == ["CPU", "CPU_F32"]
    with pytest.raises(ValueError, match=r"unknown device 'NOPE'.*CPU"):
        check_devices(["CPU", "NOPE"])
    with pytest.raises(ValueError, match="include the real device's name"):
        check_devices(["FAST=CPU:precision=f32"])  # OpenVINO refuses a plugin name without "CPU"
    with pytest.raises(ValueError, match="named twice"):
        check_devices(["CPU", "CPU"])


def test_plugin_library_comes_from_the_openvino_package() -> None:
    path = find_plugin_library(ov.Core(), "CPU")
    assert path.is_file() and Path(ov.__file__).resolve().parent in path.parents


# ----------------------------------------------------------------------------- measuring


@pytest.mark.parametrize("device", DEVICES)
def test_all_on_one_device(net: ov.Model, device: str) -> None:
    backend = OpenVINOBackend(net, DEVICES, timing=FAST)
    assert backend.races  # it can time a slower placement shorter
    m = backend.measure_ops(everything_on(net, device))
    assert m.ok, m.error
    assert m.info["path"] == "single" and m.info["stages"] == 1 and m.info["devices_used"] == [device]
    assert 0 < m.latency_s < 0.1 and m.spread >= 0
    # the median's interval: with 3 samples no pair of order statistics reaches 95%, so the
    # full range, at its own coverage 1 - 2 / 2**3
    assert m.interval_s == [min(m.samples_s), max(m.samples_s)] and m.interval_level == 0.75
    assert len(m.samples_s) == FAST.repeats and m.runs == FAST.repeats * FAST.block
    assert m.info["compile_s"] > 0 and m.backend == "openvino-auto"


def test_two_way_split_runs_on_hetero(net: ov.Model) -> None:
    backend = OpenVINOBackend(net, DEVICES, mode="hetero", timing=CHECKED)
    m = backend.measure_ops(halves(net, "CPU", "CPU_F32"))
    assert m.ok, m.error
    assert m.info["path"] == "hetero" and m.info["stages"] == 2
    assert m.info["devices_used"] == DEVICES
    assert m.info["max_rel_error"] <= m.info["tolerance"]
    for op in net.get_ordered_ops():  # the caller's model is never touched
        assert "affinity" not in op.get_rt_info()


def test_random_split_pipeline_equals_unsplit_model_in_f32(net: ov.Model) -> None:
    # Both devices compute in f32, so the split model must reproduce the unsplit one.
    backend = OpenVINOBackend(net, ["CPU:precision=f32", "CPU_F32"], mode="pipeline", timing=CHECKED)
    affinity = random_affinity(net, ["CPU", "CPU_F32"], seed=3)
    m = backend.measure_ops(affinity)
    assert m.ok, m.error
    assert m.info["path"] == "pipeline" and m.info["stages"] == len(plan_stages(net, affinity)) >= 8
    assert m.info["tolerance"] == 1e-4 and m.info["max_rel_error"] <= 1e-5


def test_random_split_pipeline_bf16_f32_mix_within_tolerance(net: ov.Model) -> None:
    backend = OpenVINOBackend(net, DEVICES, mode="pipeline", timing=CHECKED)
    for seed in (1, 2):
        m = backend.measure_ops(random_affinity(net, DEVICES, seed))
        assert m.ok, m.error
        assert m.info["path"] == "pipeline" and m.info["stages"] > 4
        assert m.info["max_rel_error"] <= m.info["tolerance"]


def test_split_stages_structure(net: ov.Model) -> None:
    affinity = random_affinity(net, DEVICES, seed=5)
    stages, outputs = split_stages(net, affinity)
    plans = plan_stages(net, affinity)
    assert [s.ops for s in stages] == [p.ops for p in plans]
    assert sorted(n for s in stages for n in s.ops) == sorted(compute_ops(net))
    assert all(a.device != b.device for a, b in zip(stages, stages[1:]))
    produced = {("x", 0)}
    for stage in stages:
        assert set(stage.inputs) <= produced, "a stage reads a tensor no earlier stage produced"
        assert len(stage.model.get_parameters()) == len(stage.inputs)
        assert len(stage.model.get_results()) == len(stage.outputs)
        assert all(affinity[name] == stage.device for name in stage.ops)
        produced |= set(stage.outputs)
    assert outputs == [("fc", 0)] and set(outputs) <= produced
    # the weights shared by b0_c1 and b4_c2 are copied into each stage that uses them
    users = [s for s in stages if {"b0_c1", "b4_c2"} & set(s.ops)]
    for stage in users:
        assert "b0_w1" in {op.get_friendly_name() for op in stage.model.get_ops()}
    assert "affinity" not in net.get_ordered_ops()[0].get_rt_info()


def test_pipeline_passes_model_inputs_straight_to_outputs() -> None:
    x = ops.parameter([1, 8], ov.Type.f32, name="x")
    two = ops.constant(np.full((1, 8), 2.0, np.float32), name="two")
    y = ops.relu(ops.multiply(x, two, name="mul"), name="relu")
    model = ov.Model([ops.result(y, name="y"), ops.result(x, name="x_out")], [x], "echo")
    backend = OpenVINOBackend(model, DEVICES, mode="pipeline", timing=CHECKED)
    m = backend.measure_ops(complete_affinity(model, {"mul": "CPU_F32", "relu": "CPU"}))
    assert m.ok, m.error
    assert m.info["stages"] == 2 and m.info["max_abs_error"] == 0.0


def test_auto_falls_back_to_pipeline_when_hetero_fails() -> None:
    # HETERO (OpenVINO 2026.4) cannot create an infer request when a Reshape's
    # shape input crosses devices: the same failure as fine-grained BERT splits.
    model = attention_net()
    compute = {n: "CPU_F32" if n == "reshape" else "CPU" for n in compute_ops(model)}
    affinity = complete_affinity(model, compute)
    failed = OpenVINOBackend(model, DEVICES, mode="hetero", timing=FAST).measure_ops(affinity)
    assert not failed.ok and failed.stage == "compile"
    assert "incompatible" in failed.error and "\n" not in failed.error
    m = OpenVINOBackend(model, DEVICES, mode="auto", timing=CHECKED).measure_ops(affinity)
    assert m.ok, m.error
    assert m.info["path"] == "pipeline" and m.info["stages"] == 3
    assert "incompatible" in m.info["hetero_error"]
    assert m.info["max_rel_error"] <= m.info["tolerance"]


def test_auto_records_its_path(net: ov.Model) -> None:
    m = OpenVINOBackend(net, DEVICES, mode="auto", timing=FAST).measure_ops(halves(net, "CPU_F32", "CPU"))
    assert m.ok, m.error
    assert m.info["path"] in ("hetero", "pipeline") and m.info["stages"] == 2
    # auto leaves HETERO when it fails or when it ignores the thread limit
    assert ("hetero_error" in m.info) == (m.info["path"] == "pipeline")
    assert m.info["cpu_per_wall"] > 0


# ----------------------------------------------------------------------------- failures


def test_bad_affinities_fail_validation(net: ov.Model) -> None:
    backend = OpenVINOBackend(net, DEVICES, timing=FAST)
    affinity = everything_on(net, "CPU")
    cases = {
        "unknown device": ({**affinity, "b2_c1": "GPU"}, r"unknown device.*'GPU'"),
        "missing op": ({k: v for k, v in affinity.items() if k != "b1_add"}, r"misses 1 .*b1_add"),
        "extra op": ({**affinity, "not_an_op": "CPU"}, r"not in the model.*not_an_op"),
    }
    for label, (bad, message) in cases.items():
        m = backend.measure_ops(bad)
        assert not m.ok and m.stage == "validate", label
        assert m.error and re.search(message, m.error), (label, m.error)


def test_unknown_backend_device_fails_every_measurement(net: ov.Model) -> None:
    backend = OpenVINOBackend(net, ["CPU", "NOPE"], timing=FAST)
    assert backend.devices == ["CPU", "NOPE"]
    m = backend.measure_ops(everything_on(net, "CPU"))
    assert not m.ok and m.stage == "validate"
    assert "'NOPE'" in m.error and "real devices here: CPU" in m.error


def test_tiny_timeout_fails_with_stage_timeout(net: ov.Model) -> None:
    timing = TimingConfig(warmup=1, repeats=3, block=2, timeout_s=1e-6, threads=1, precision=0)
    for mode in ("hetero", "pipeline"):
        m = OpenVINOBackend(net, DEVICES, mode=mode, timing=timing).measure_ops(halves(net, "CPU", "CPU_F32"))
        assert not m.ok and m.stage == "timeout", (mode, m.error)
        assert "timeout_s" in m.error and m.info["compile_s"] > 0


# ----------------------------------------------------------------------------- profiling


def test_profile_ops_covers_compute_ops_and_matches_latency(net: ov.Model) -> None:
    backend = OpenVINOBackend(net, DEVICES, timing=FAST)
    profile = backend.profile_ops("CPU_F32")
    assert set(profile) == set(op_names(net))
    assert all(t >= 0 for t in profile.values())
    convs = [n for n in compute_ops(net) if "_c" in n]
    assert all(profile[n] > 0 for n in convs), "every convolution is a main op of a runtime node"
    latency = backend.measure_ops(everything_on(net, "CPU_F32")).latency_s
    # same units and the same work: within a factor that a machine shared with other
    # processes can put between a profiled run and a timed one (seen: 3x under load)
    assert 0.25 * latency < sum(profile.values()) < 4.0 * latency
    with pytest.raises(ValueError, match="NOPE"):
        backend.profile_ops("NOPE")


def test_complete_affinity_places_structural_ops_with_their_users(net: ov.Model) -> None:
    compute = {n: ("CPU" if i % 2 else "CPU_F32") for i, n in enumerate(compute_ops(net))}
    full = complete_affinity(net, compute)
    assert set(full) == set(op_names(net))
    assert full["x"] == compute["b0_c1"] and full["b0_w2"] == compute["b0_c2"]
    assert full["logits"] == compute["fc"] and full["fc_w"] == compute["fc"]
    partial = complete_affinity(net, {k: v for k, v in compute.items() if k != "b0_c1"})
    assert "b0_c1" not in partial


# ----------------------------------------------------------------------------- OpenVINO AUTO


def test_auto_device_measures_the_whole_model_on_a_real_device() -> None:
    model = load_model("tiny_cnn")
    timing = TimingConfig(warmup=2, repeats=5, block=4, timeout_s=60.0, threads=1, precision=0)
    auto = measure_auto(model, DEVICES, timing)
    assert auto.ok, auto.error
    assert auto.backend == AUTO_BACKEND and auto.runs == 20
    assert math.isfinite(auto.latency_s) and auto.latency_s > 0
    # the virtual CPU_F32 is the CPU: AUTO chooses among the real devices only
    assert auto.info["auto_device"] == "AUTO:CPU" and auto.info["candidates"] == ["CPU"]
    assert auto.info["execution_devices"] == ["CPU"]
    cpu = OpenVINOBackend(model, ["CPU"], timing=timing).measure_ops(everything_on(model, "CPU"))
    assert cpu.ok, cpu.error
    # the same model on the same device at the plugin defaults: the same latency up to the
    # noise of a shared machine on a model that runs in a fraction of a millisecond
    assert cpu.latency_s / 4 < auto.latency_s < cpu.latency_s * 4, (auto.latency_s, cpu.latency_s)
    # a zoo name works too
    assert measure_auto("tiny_cnn", ["CPU"], FAST).ok


def test_auto_device_failures_are_measurements_with_a_sentence() -> None:
    bad = measure_auto("tiny_cnn", ["CPU", "NPU9"], FAST)
    assert not bad.ok and bad.stage == "validate" and "NPU9" in bad.error
    meta = measure_auto("tiny_cnn", ["AUTO"], FAST)
    assert not meta.ok and meta.stage == "validate" and "meta device" in meta.error
    missing = measure_auto("no_such_model", ["CPU"], FAST)
    assert not missing.ok and missing.stage == "validate" and "unknown model" in missing.error
    late = measure_auto("tiny_cnn", ["CPU"], TimingConfig(timeout_s=1e-6))
    assert not late.ok and late.stage == "timeout" and "timeout_s" in late.error


def test_auto_candidates_are_real_devices_in_auto_priority_order() -> None:
    kinds = {"GPU.0": "Type.INTEGRATED", "GPU.1": "Type.DISCRETE"}
    assert auto_candidates(["CPU", "CPU_F32", "CPU2=CPU:precision=f32"], ["CPU"]) == (["CPU"], [])
    assert auto_candidates(["CPU", "GPU"], ["CPU", "GPU"]) == (["GPU", "CPU"], [])
    assert auto_candidates(["NPU", "CPU", "GPU.0", "GPU.1"], ["CPU", "GPU.0", "GPU.1", "NPU"],
                           kinds.get) == (["GPU.1", "GPU.0", "CPU", "NPU"], [])
    _, problems = auto_candidates(["CPU", "GPU"], ["CPU"])
    assert len(problems) == 1 and "'GPU'" in problems[0]


def test_auto_leaves_hetero_when_its_timing_shows_more_threads_than_allowed(net: ov.Model, monkeypatch) -> None:
    # the probe before timing sees one busy thread (as when other processes hold the cores
    # then), the timing two (as when HETERO's sub-models spread over both cores after)
    monkeypatch.setattr(backend_module, "busy_threads", lambda runner, runs: 1.0)
    monkeypatch.setattr(timing_module, "cpu_per_wall", lambda cpu_start, wall_start: 2.0)
    backend = OpenVINOBackend(net, DEVICES, mode="auto", timing=FAST)
    m = backend.measure_ops(halves(net, "CPU_F32", "CPU"))
    assert m.ok, m.error
    assert m.info["path"] == "pipeline" and "while timed" in m.info["hetero_error"]
    # a property of the devices: the next split goes to the pipeline without trying HETERO
    again = backend.measure_ops(halves(net, "CPU", "CPU_F32"))
    assert again.ok and again.info["path"] == "pipeline" and "earlier placement" in again.info["hetero_error"]
    # with the devices' own limit respected, HETERO's timing stands
    monkeypatch.setattr(timing_module, "cpu_per_wall", lambda cpu_start, wall_start: 1.0)
    fresh = OpenVINOBackend(net, DEVICES, mode="auto", timing=FAST).measure_ops(halves(net, "CPU_F32", "CPU"))
    assert fresh.ok and fresh.info["path"] == "hetero" and "hetero_error" not in fresh.info


def test_auto_leaves_hetero_when_its_probe_shows_more_threads_than_allowed(net: ov.Model, monkeypatch) -> None:
    # the few runs before timing keep two threads busy where each device may use one
    monkeypatch.setattr(backend_module, "busy_threads", lambda runner, runs: 2.0)
    m = OpenVINOBackend(net, DEVICES, mode="auto", timing=FAST).measure_ops(halves(net, "CPU_F32", "CPU"))
    assert m.ok, m.error
    assert m.info["path"] == "pipeline"
    assert "kept 2.0 threads busy where each device may use 1" in m.info["hetero_error"]
    assert "while timed" not in m.info["hetero_error"]
