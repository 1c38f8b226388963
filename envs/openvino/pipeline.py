"""Compiling placements: the stage pipeline and single-device models, through the compiled-stage cache.

:class:`Compiler` compiles in one ``openvino.Core`` and keeps what it compiled
in a :class:`~envs.openvino.stage_cache.StageCache`: a placement's pipeline
looks up each of its stages by (device, ops) and only splits the model and
compiles when one is missing; the whole model on one device is kept the same
way. Counts ``compiles`` (compile_model calls) so tests and benchmarks can see
what the cache saved.
"""
from __future__ import annotations

import time
from typing import Hashable, Mapping, Optional, Sequence

import openvino as ov

from envs.base import TimingConfig
from envs.openvino.runners import PipelineRunner, RequestRunner, StageFailure, ov_errors, timeout_text
from envs.openvino.stage_cache import CachedStage, StageCache, stage_bytes
from envs.openvino.stages import TensorKey, plan_stages, split_stages

__all__ = ["Compiler"]


class Compiler:
    """Compiles a model's placements on the devices of one Core, with a cache of compiled stages.

    Attributes:
        cache: the compiled stages (and single-device models) kept.
        compiles: ``compile_model`` calls made so far.
    """

    def __init__(self, core: ov.Core, model: ov.Model, timing: TimingConfig,
                 inputs: Sequence[ov.Tensor]) -> None:
        """
        Args:
            core: the Core whose devices placements use.
            model: the model (never modified).
            timing: timeout wording and the cache bounds (``stage_cache``, ``stage_cache_mb``).
            inputs: the tensors fed to the model's parameters.
        """
        self.core = core
        self.model = model
        self.timing = timing
        self.inputs = list(inputs)
        self.cache = StageCache(timing.stage_cache, int(timing.stage_cache_mb * 2 ** 20))
        self.compiles = 0
        self._output_keys: list[TensorKey] = [
            (r.input_value(0).get_node().get_friendly_name(), r.input_value(0).get_index())
            for r in model.get_results()]
        self._sources: dict[TensorKey, ov.Tensor] = {
            (param.get_friendly_name(), 0): tensor for param, tensor in zip(model.get_parameters(), self.inputs)}
        for result in model.get_results():  # a model output taken straight from a Constant
            producer = result.input_value(0).get_node()
            if producer.get_type_name() == "Constant":
                self._sources[(producer.get_friendly_name(), 0)] = producer.get_tensor_view()

    def compile(self, model: ov.Model, device: str, deadline: float,
                info: dict[str, object]) -> ov.CompiledModel:
        """Compile on ``device``, add the time to ``info['compile_s']``, check the budget after."""
        start = time.perf_counter()
        self.compiles += 1
        try:
            with ov_errors("compile", f"compiling on {device} failed"):
                compiled = self.core.compile_model(model, device)
        finally:
            info["compile_s"] = float(info.get("compile_s", 0.0)) + time.perf_counter() - start
        if time.perf_counter() > deadline:
            raise StageFailure("timeout", timeout_text(self.timing, info, runs=0))
        return compiled

    def single(self, device: str, deadline: float, info: dict[str, object]) -> RequestRunner:
        """The whole model on ``device`` (cached), its request run once."""
        key: Hashable = ("single", device)
        entry = self.cache.get(key)
        self._count(info, hit=entry is not None)
        if entry is None:
            compiled = self.compile(self.model, device, deadline, info)
            entry = CachedStage(device, [], [], compiled, stage_bytes(self.model))
            self.cache.put(key, entry)
        runner = RequestRunner(entry.compiled, self.inputs, request=entry.request)
        entry.request = runner.request
        runner.infer()
        return runner

    def pipeline(self, affinity: Mapping[str, str], deadline: float,
                 info: dict[str, object]) -> PipelineRunner:
        """The placement as a stage pipeline: cached stages reused, the others compiled; run once."""
        info["path"] = "pipeline"
        plans = plan_stages(self.model, affinity)
        keys: list[Hashable] = [("stage", plan.device, tuple(plan.ops)) for plan in plans]
        entries: list[Optional[CachedStage]] = [self.cache.get(key) for key in keys]
        for entry in entries:
            self._count(info, hit=entry is not None)
        if any(entry is None for entry in entries):
            if self.model.get_sinks():
                raise StageFailure("compile", "splitting the model into stages failed: stateful models "
                                              "(ReadValue/Assign) cannot be split into stages")
            with ov_errors("compile", "splitting the model into stages failed"):
                stages, _ = split_stages(self.model, affinity)
            for s, stage in enumerate(stages):
                if entries[s] is None:
                    compiled = self.compile(stage.model, stage.device, deadline, info)
                    entries[s] = CachedStage(stage.device, list(stage.inputs), list(stage.outputs), compiled,
                                             stage_bytes(stage.model))
                    self.cache.put(keys[s], entries[s])
        steps = [e for e in entries if e is not None]
        runner = PipelineRunner(steps, [e.compiled for e in steps], self._sources, self._output_keys,
                                requests=[e.request for e in steps])
        for entry, request in zip(steps, runner.requests):
            entry.request = request
        runner.infer()
        return runner

    @staticmethod
    def _count(info: dict[str, object], hit: bool) -> None:
        name = "cached_stages" if hit else "compiled_stages"
        info[name] = int(info.get(name, 0)) + 1
