"""The ``torch`` backend: placements of a PyTorch model measured on real torch devices.

For each placement (:meth:`TorchBackend.measure_ops`, an fx node name -> device map):

1. **Fit check.** The parameters each capped device would hold, in its precision, are
   summed; a placement over the device's weight budget fails with stage ``memory`` before
   anything runs. The budget is the cap on a CPU, and on a GPU the cap less room for the
   libraries' workspaces and the largest activations (:func:`weight_budget`), so what
   passes the check also runs under the allocator's cap.
2. **Build.** The program is cut into stages (:mod:`envs.pytorch.stages`); parameters are
   moved to a device once and shared by every placement that puts them there. Built
   stages are kept (``TimingConfig.stage_cache`` of them), so a placement that shares
   stages with earlier ones builds only its new ones, as OpenVINO's compiled-stage cache
   does; stages on a capped device are built per placement. The last few built
   placements are kept too (only one while a CUDA device is capped, so cached stages
   never hold GPU memory a placement needs).
3. **Time.** On a GPU a newly built placement first runs once untimed: that run loads
   kernels and grows the allocator, a one-time cost racing would otherwise judge the
   placement by. Then warm-up runs and timed blocks (:func:`envs.timing.time_runs`, raced
   against the best placement so far like OpenVINO's), each run taking the inputs from
   the host (page-locked when a GPU is used) and returning the outputs to it, on the
   backend's fixed intra-op thread count. On a GPU every run ends with one
   synchronisation (``torch.cuda.synchronize()``; a placement entirely on one GPU is
   timed with CUDA events too and synchronises on its end event); the samples are
   ``time.perf_counter`` block means, summarised as a median and its 95% interval
   (:mod:`envs.intervals`, on the :class:`~envs.base.Measurement`).
   Under the throughput objective (``objective="throughput"``) each timed run is a round
   of pipelined inference instead, several samples in flight
   (:mod:`envs.pytorch.pipelined`), and the latency is the time per sample.
4. **Check.** With ``TimingConfig.validate_outputs`` the outputs are compared once with the
   unsplit program's on the CPU in float32 (relative error within
   :data:`envs.openvino.runners.TOLERANCE`-like bounds per precision, :data:`TOLERANCE`).

A run out of memory (``torch.OutOfMemoryError``), a stage that raises, or a timing past
``TimingConfig.timeout_s`` is a failed :class:`~envs.base.Measurement`, never a crash.
"""
from __future__ import annotations

import gc
import time
from collections import OrderedDict
from typing import Mapping, Optional, Sequence

import numpy as np
import torch

from envs.backends import objective_error
from envs.base import Backend, Measurement, TimingConfig, summarize_times
from envs.pytorch.devices import TorchDevice, check_devices
from envs.pytorch.pipelined import PipelinedRunner, in_flight_for
from envs.pytorch.stages import (OnDevice, StageCache, TensorCache, build_placed, to_host,
                                 weight_bytes_per_device)
from envs.timing import StageFailure, time_runs, timeout_text

__all__ = ["TorchBackend", "PIPELINE_ROUND", "TOLERANCE", "output_error", "weight_budget",
           "WORKSPACE_BYTES", "ALLOCATOR_SLACK_BYTES"]

#: samples per worker in a round of pipelined inference (the pipeline fills and drains once)
PIPELINE_ROUND = 4

#: relative output error (max abs error / max abs reference output) a placement may show,
#: by the least precise device it uses
TOLERANCE = {"float32": 1e-3, "float16": 2e-2, "bfloat16": 8e-2}


def output_error(outputs: Sequence[torch.Tensor], reference: Sequence[torch.Tensor]) -> float:
    """The largest relative error of ``outputs`` against ``reference`` (both on the host)."""
    worst = 0.0
    for o, r in zip(outputs, reference):
        if not r.is_floating_point():
            worst = max(worst, 0.0 if torch.equal(o.to(r.dtype), r) else float("inf"))
            continue
        scale = float(r.abs().max()) or 1.0
        worst = max(worst, float((o.float() - r).abs().max()) / scale)
    return worst


#: memory a capped GPU keeps free of weights for cuBLAS/cuDNN workspaces (besides twice the
#: largest activation of the graph)
WORKSPACE_BYTES = 32 * 2 ** 20
#: and for the caching allocator's granularity: the cap limits the memory it reserves, which
#: grows in blocks of up to 20 MiB, so reserved memory runs ahead of what is allocated
ALLOCATOR_SLACK_BYTES = 2 * 20 * 2 ** 20


def weight_budget(device: TorchDevice, program) -> float:
    """The bytes of weights a capped ``device`` may hold: the cap itself on a CPU; on a GPU
    the cap less :data:`WORKSPACE_BYTES`, :data:`ALLOCATOR_SLACK_BYTES` and twice the
    largest tensor an op of ``program`` writes (an op's input and output are live
    together), so a placement that passes the fit check also runs under the allocator's cap. It depends on the program alone, so
    every coarsening of its graph and its profile agree on it."""
    if device.mem_bytes is None:
        return float("inf")
    if not device.is_cuda:
        return float(device.mem_bytes)
    largest = 0.0
    for n in program.gm.graph.nodes:
        if n.op != "call_function":  # parameters and inputs are not written by an op
            continue
        val = n.meta.get("val")
        for t in (val if isinstance(val, (list, tuple)) else [val]):
            if isinstance(t, torch.Tensor):
                largest = max(largest, float(t.numel() * t.element_size()))
    return max(0.0, float(device.mem_bytes) - WORKSPACE_BYTES - ALLOCATOR_SLACK_BYTES - 2.0 * largest)


def _free(placed) -> None:
    """Drop the device copies of a built placement's own stages now (those a
    :class:`~envs.pytorch.stages.StageCache` shares stay). Its stages are fx modules, which
    sit in reference cycles, so without this the copies would stay allocated until the
    garbage collector runs: on a capped GPU, beside the next placement's, past the cap."""
    for m in placed.modules():
        if isinstance(m, OnDevice) and not m.shared:
            for name in list(m.stage._buffers):
                m.stage._buffers[name] = None


class _Runner:
    """``infer()`` of one placed program on the program's example inputs."""

    def __init__(self, placed, inputs: Sequence[torch.Tensor], cuda: bool) -> None:
        self.placed, self.inputs, self.cuda = placed, tuple(inputs), cuda
        self.outputs = None

    def infer(self) -> None:
        with torch.inference_mode():
            out = self.placed(*self.inputs)
            self.outputs = to_host(out)
        if self.cuda:
            torch.cuda.synchronize()

    def close(self) -> None:
        pass


class _EventRunner(_Runner):
    """A placement entirely on one GPU: each run is timed with CUDA events as well, and
    ``last_s`` holds that time; the run ends with one synchronisation, on its end event."""

    def infer(self) -> None:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        with torch.inference_mode():
            self.outputs = to_host(self.placed(*self.inputs))
        end.record()
        end.synchronize()
        self.last_s = start.elapsed_time(end) / 1e3


class TorchBackend(Backend):
    """Node placements of ``graph`` (a graph of ``program``, :mod:`hsdag_core.torch_graph`)
    measured on real PyTorch devices (see the module docstring).

    Args:
        graph: the placement graph (any coarsening of the program's graph).
        program: the :class:`~hsdag_core.torch_graph.TorchProgram`.
        devices: device specs (:mod:`envs.pytorch.devices`).
        timing: warm-up, blocks, racing, time limit, output check.
    """

    races = True

    def __init__(self, graph, program, devices: Sequence[str], timing: TimingConfig = TimingConfig(),
                 objective: str = "sequential") -> None:
        if objective_error("torch", objective):  # what the registry says it measures
            raise ValueError(objective_error("torch", objective))
        self.graph, self.program, self.timing, self.objective = graph, program, timing, objective
        self.torch_devices: list[TorchDevice] = check_devices(list(devices))
        self.by_name = {d.name: d for d in self.torch_devices}
        self.devices = [d.name for d in self.torch_devices]
        self.name = "torch"
        self.cuda = any(d.is_cuda for d in self.torch_devices)
        self.capped = {d.name for d in self.torch_devices if d.mem_bytes is not None}
        #: bytes of weights each capped device may hold: its cap less, on a GPU, room for
        #: the libraries' workspaces and the activations live around the largest op
        #: the program's inputs on the host, page-locked when a GPU is used, so the copy to
        #: the first GPU stage does not block the host
        self.inputs = tuple(x.pin_memory() if self.cuda else x for x in program.example_inputs)
        self.weight_budget = {d.name: weight_budget(d, program) for d in self.torch_devices
                              if d.mem_bytes is not None}
        self.cache = TensorCache()
        self.stages = StageCache(timing.stage_cache)
        self._built: OrderedDict = OrderedDict()
        self._race_best: Optional[float] = None
        self._reference: Optional[list[torch.Tensor]] = None
        #: the intra-op threads every measurement runs with: the timing's, else the count
        #: torch had when the backend was made (a method that changes it, as HSDAG's
        #: training does, then cannot change what a timing means)
        self.threads = timing.threads or torch.get_num_threads()
        torch.set_num_threads(self.threads)
        if self.cuda and self.capped:  # what an earlier backend left (e.g. a profile's) goes first
            gc.collect()
            torch.cuda.empty_cache()
        self.apply_caps()

    def apply_caps(self, on: bool = True) -> None:
        """Cap each capped GPU's allocator at its memory cap (``on=False``: lift the caps,
        e.g. while profiling op times, which do not depend on them)."""
        for d in self.torch_devices:
            if d.is_cuda and d.mem_bytes is not None:
                total = torch.cuda.get_device_properties(d.index).total_memory
                frac = min(1.0, d.mem_bytes / total) if on else 1.0
                torch.cuda.set_per_process_memory_fraction(frac, d.index)

    # -------------------------------------------------------------- interface
    def measure(self, placement: Mapping[str, str], race: bool = False) -> Measurement:
        from hsdag_core.compgraph import GraphError

        try:
            affinity = self.graph.expand_placement(placement)
        except GraphError as e:
            return Measurement.failure(self.name, "validate", str(e))
        return self.measure_ops(affinity, race)

    def measure_array(self, placement: np.ndarray, race: bool = False) -> Measurement:
        return self.measure({nm: self.devices[int(d)] for nm, d in zip(self.graph.names, placement)},
                            race=race)

    def measure_ops(self, affinity: Mapping[str, str], race: bool = False,
                    validate: Optional[bool] = None) -> Measurement:
        """Measure an fx node name -> device placement (see the module docstring)."""
        unknown = sorted(set(affinity.values()) - set(self.devices))
        if unknown:
            return Measurement.failure(self.name, "validate", f"device {unknown[0]} is not one of "
                                       f"the backend's devices {', '.join(self.devices)}")
        used = sorted(set(affinity.values()), key=self.devices.index)
        info: dict[str, object] = {"devices": used}
        over = self._over_cap(affinity)
        if over:
            return Measurement.failure(self.name, "memory", over, **info)
        deadline = time.perf_counter() + self.timing.timeout_s
        torch.set_num_threads(self.threads)
        try:
            start = time.perf_counter()
            placed, stages, fresh = self._placed(affinity)
            info["stages"] = len(stages)
            info["compile_s"] = time.perf_counter() - start
            samples, outputs = self._time(placed, len(stages), used, fresh, race, deadline, info)
            if self.timing.validate_outputs if validate is None else validate:
                err = output_error(outputs, self.reference())
                info["output_error"] = err
                tol = max(TOLERANCE[self.by_name[d].dtype] for d in used)
                if not err <= tol:
                    raise StageFailure("validate", f"the outputs differ from the unsplit model's by "
                                       f"{err:.2g} (relative), more than {tol:g}")
        except StageFailure as f:
            return Measurement.failure(self.name, f.stage, f.message, **info)
        except torch.OutOfMemoryError as e:
            self._release()
            return Measurement.failure(self.name, "memory", "the placement ran out of memory: "
                                       + str(e).splitlines()[0][:200], **info)
        except (RuntimeError, ValueError, TypeError) as e:  # a stage PyTorch cannot run
            self._release()
            return Measurement.failure(self.name, "infer", f"the placement failed to run: "
                                       f"{type(e).__name__}: {str(e).splitlines()[0][:200]}", **info)
        if time.perf_counter() > deadline:
            return Measurement.failure(self.name, "timeout", timeout_text(self.timing, info, 0), **info)
        latency, spread = summarize_times(samples)
        if race and info.get("raced") != "stopped":
            self._race_best = latency if self._race_best is None else min(self._race_best, latency)
        return Measurement(ok=True, latency_s=latency, spread=spread, runs=len(samples),
                           backend=self.name, samples_s=list(samples), info=info)

    # ---------------------------------------------------------------- helpers
    def _time(self, placed, stages: int, used: list[str], fresh: bool, race: bool, deadline: float,
              info: dict) -> tuple[list[float], list[torch.Tensor]]:
        """The timed samples (seconds per inference, or per sample of a pipeline under the
        throughput objective) and the outputs of the last run."""
        best = self._race_best if race else None
        single_gpu = False
        if self.objective == "throughput":  # a timed run is a round of `unit` samples
            in_flight = in_flight_for(stages)
            runner = PipelinedRunner(placed, self.inputs, in_flight, PIPELINE_ROUND * in_flight)
            unit = runner.samples
            # CPU devices (cpu, cpu:bf16) share the cores: stages of two of them run at once
            # in the pipeline's workers, so each gets its share of the intra-op threads
            # rather than all of them competing for the same cores
            cpus = sum(1 for d in used if not self.by_name[d].is_cuda)
            torch.set_num_threads(max(1, self.threads // max(1, cpus)))
            info.update(objective="throughput", in_flight=in_flight, samples_per_round=unit,
                        threads_per_cpu_device=torch.get_num_threads())
        else:
            single_gpu = len(used) == 1 and self.by_name[used[0]].is_cuda
            runner = (_EventRunner if single_gpu else _Runner)(placed, self.inputs, self.cuda)
            unit = 1
        try:
            if fresh and self.cuda:  # its first run's one-time costs (see the module docstring)
                start = time.perf_counter()
                runner.infer()
                info["first_run_s"] = time.perf_counter() - start
            runs = time_runs(runner, self.timing, 0, deadline, info, None if best is None else best * unit)
        finally:
            runner.close()
            torch.set_num_threads(self.threads)
        if single_gpu and not info.get("raced"):
            info["cuda_event_s"] = runner.last_s
        return [r / unit for r in runs], runner.outputs

    def reference(self) -> list[torch.Tensor]:
        """The unsplit program's outputs on the CPU in float32 (computed once)."""
        if self._reference is None:
            with torch.inference_mode():
                self._reference = to_host(self.program.gm(*self.program.example_inputs))
        return self._reference

    def outputs(self, affinity: Mapping[str, str]) -> list[torch.Tensor]:
        """The outputs of one run of the placement ``affinity`` on the host (the built
        placement is the one :meth:`measure_ops` timed, from the cache when it was)."""
        placed, _, _ = self._placed(affinity)
        with torch.inference_mode():
            return to_host(placed(*self.inputs))

    def _over_cap(self, affinity: Mapping[str, str]) -> Optional[str]:
        if not self.capped:
            return None
        held = weight_bytes_per_device(self.program.gm, affinity, self.by_name)
        for name in self.capped:
            cap, budget = self.by_name[name].mem_bytes, self.weight_budget[name]
            if held.get(name, 0.0) > budget:
                room = "" if budget == cap else f" ({cap / 1e6:.0f} MB less room to run)"
                return (f"the placement puts {held[name] / 1e6:.0f} MB of weights on {name}, "
                        f"more than its {budget / 1e6:.0f} MB{room}")
        return None

    def _placed(self, affinity: Mapping[str, str]):
        """The built placement of ``affinity``, its stages' devices, and whether it was built
        now (False: from the cache of built placements)."""
        key = tuple(sorted(affinity.items()))
        hit = self._built.get(key)
        if hit is not None:
            self._built.move_to_end(key)
            return (*hit, False)
        keep = 1 if any(self.by_name[d].is_cuda for d in self.capped) else max(1, self.timing.stage_cache)
        while len(self._built) >= keep:
            _free(self._built.popitem(last=False)[1][0])
        built = build_placed(self.program.gm, affinity, self.by_name, self.cache, self.stages)
        self._built[key] = built
        return (*built, True)

    def _release(self) -> None:
        """After a failure: drop built placements and cached copies, free GPU memory."""
        for placed, _ in self._built.values():
            _free(placed)
        self._built.clear()
        self.stages.clear()
        self.cache.clear()
        if self.cuda:
            torch.cuda.empty_cache()

    def own_baselines(self) -> dict[str, object]:
        """What a PyTorch user would do instead of a learned placement, beside each device
        alone: Accelerate's ``device_map="auto"`` under the same memory caps
        (:mod:`envs.pytorch.accelerate_map`), as a node placement, or why it cannot be made."""
        from envs.pytorch.accelerate_map import accelerate_placement

        try:
            return {"accelerate_auto": accelerate_placement(self.program, self.graph, self.torch_devices)}
        except (ValueError, RuntimeError, ImportError) as e:
            return {"accelerate_auto": str(e)}

    def describe(self) -> list[str]:
        return [d.describe() for d in self.torch_devices]
