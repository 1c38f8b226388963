"""Pipelined inference on the torch backend (the throughput objective), for real on the CPU.

The runner's two promises are checked from the stages' own records of when they ran:
stages on different devices overlap (samples stream through), and a device never runs two
stages at once. Then the backend measures a pipeline's time per sample of tiny_cnn on
``cpu`` + ``cpu:bf16`` with outputs checked, and a backend that cannot measure the
throughput objective is refused in one sentence.
"""
from __future__ import annotations

import threading
import time

import pytest
import torch
from torch import nn

from envs.backends import objective_error
from envs.base import TimingConfig
from envs.graph_backend import make_backend, parse_placement
from envs.pytorch.devices import parse_device
from envs.pytorch.pipelined import PipelinedRunner, in_flight_for
from envs.pytorch.stages import OnDevice
from envs.backends import build_graph


class _Busy(nn.Module):
    """A stage that records when it ran (it sleeps, releasing the interpreter, as a device
    kernel does) and adds one."""

    def __init__(self, name: str, log: list, guard: threading.Lock) -> None:
        super().__init__()
        self.name, self.log, self.guard = name, log, guard

    def forward(self, x):
        start = time.perf_counter()
        time.sleep(0.004)
        with self.guard:
            self.log.append((self.name, start, time.perf_counter()))
        return x + 1


class _Chain(nn.Module):
    def __init__(self, stages) -> None:
        super().__init__()
        self.stages = nn.ModuleList(stages)

    def forward(self, x):
        for s in self.stages:
            x = s(x)
        return (x,)


def _run(devices: list[str]) -> tuple[list, list]:
    log, guard = [], threading.Lock()
    chain = _Chain([OnDevice(_Busy(f"s{i}", log, guard), parse_device(d)) for i, d in enumerate(devices)])
    runner = PipelinedRunner(chain, [torch.zeros(2)], in_flight=2, samples=8)
    try:
        runner.infer()
    finally:
        runner.close()
    assert all(m.lock is None for m in chain.modules() if isinstance(m, OnDevice))
    return log, runner.outputs


def _overlaps(a, b) -> bool:
    return a[1] < b[2] and b[1] < a[2]


def test_stages_on_two_devices_overlap_and_a_device_runs_one_stage_at_a_time():
    log, outputs = _run(["cpu", "cpu:bf16"])
    assert len(log) == 16 and torch.equal(outputs[0], torch.full((2,), 2.0))
    by = {name: [r for r in log if r[0] == name] for name in ("s0", "s1")}
    # each device's own stages never overlap ...
    for runs in by.values():
        assert not any(_overlaps(a, b) for i, a in enumerate(runs) for b in runs[i + 1:])
    # ... and the two devices work at once (the pipeline streams samples)
    assert any(_overlaps(a, b) for a in by["s0"] for b in by["s1"])


def test_two_stages_on_one_device_take_turns():
    log, _ = _run(["cpu", "cpu"])
    assert len(log) == 16
    assert not any(_overlaps(a, b) for i, a in enumerate(log) for b in log[i + 1:])


def test_a_round_needs_a_sample_per_worker():
    with pytest.raises(ValueError, match="at least one sample per worker"):
        PipelinedRunner(_Chain([]), [torch.zeros(1)], in_flight=4, samples=2)
    assert [in_flight_for(s) for s in (1, 2, 3, 9)] == [1, 2, 3, 4]


def test_the_torch_backend_measures_a_pipelines_time_per_sample():
    program, graph, _, _ = build_graph("tiny_cnn", "none", None, "torch")
    timing = TimingConfig(warmup=1, repeats=2, block=1, validate_outputs=True, precision=0)
    devices = ["cpu", "cpu:bf16"]
    backend = make_backend("torch", graph, program, devices, timing, None, "throughput")
    placement = parse_placement("split:0.5", graph, devices)
    m = backend.measure(placement)
    assert m.ok, m.error
    assert m.info["objective"] == "throughput" and m.info["in_flight"] == in_flight_for(m.info["stages"])
    assert m.info["samples_per_round"] == 4 * m.info["in_flight"]
    assert 0 < m.latency_s < 10 and m.info["output_error"] <= 8e-2
    # the two CPU devices' stages run at once on the same cores: each gets half the threads,
    # and the backend's own count is back afterwards
    assert m.info["threads_per_cpu_device"] == max(1, backend.threads // 2)
    assert torch.get_num_threads() == backend.threads
    one = make_backend("torch", graph, program, devices, timing, None, "sequential").measure(placement)
    assert one.ok and "objective" not in one.info


def test_a_backend_that_cannot_measure_the_objective_is_refused():
    assert objective_error("torch", "throughput") == objective_error("simulator", "parallel") == ""
    text = objective_error("auto", "throughput")
    assert "sequential" in text and "--backend simulator or torch" in text
    with pytest.raises(ValueError, match="parallel"):
        make_backend("torch", None, object(), ["cpu"], TimingConfig(), None, "parallel")
