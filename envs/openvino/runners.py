"""Running and timing compiled placements: one infer request, or a pipeline of stage requests.

Every OpenVINO call that can fail is wrapped here (:func:`ov_errors`) and
becomes a :class:`StageFailure` (a failed Measurement); any other exception,
such as a bug in this project's own code, propagates.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Mapping, Optional, Sequence, Union

import numpy as np
import openvino as ov

from envs.timing import (OVERSUBSCRIPTION, StageFailure, busy_threads, cpu_per_wall, time_runs,  # noqa: F401
                          timeout_text)
from envs.openvino.stage_cache import CachedStage
from envs.openvino.stages import Stage, TensorKey
from hsdag_core.models import openvino_error_text

__all__ = ['OVERSUBSCRIPTION', 'OV_ERRORS', 'THREAD_PROBE_RUNS', 'TOLERANCE', 'PipelineRunner', 'RequestRunner', 'Runner', 'StageFailure', 'busy_threads', 'cpu_per_wall', 'ov_errors', 'random_inputs', 'time_runs', 'timeout_text']

# Relative output error (max abs error / max abs reference output) allowed by
# validate_outputs, by the least precise inference precision among the devices
# used; on small conv nets f32 splits agree exactly and bf16 runs differ from
# f32 by about 2e-3.
TOLERANCE = {"f32": 1e-4, "f16": 1e-2, "bf16": 5e-2}
THREAD_PROBE_RUNS = 3

OV_ERRORS = (RuntimeError, MemoryError)
"""What OpenVINO raises when it cannot compile or run something (its C++
exceptions arrive as RuntimeError, an allocation failure as MemoryError)."""


@contextmanager
def ov_errors(stage: str, what: str) -> Iterator[None]:
    """Turn an OpenVINO error raised inside the block into ``StageFailure(stage)``.

    The sentence is ``what`` followed by OpenVINO's own message; a MemoryError
    becomes stage ``memory``. Wrap OpenVINO calls only: any other exception
    (a bug in this project's code) passes through unchanged.
    """
    try:
        yield
    except MemoryError as exc:
        raise StageFailure("memory", f"{what} ran out of memory: {openvino_error_text(exc) or 'no detail'}") from exc
    except RuntimeError as exc:
        raise StageFailure(stage, f"{what}: {openvino_error_text(exc)}") from exc


class RequestRunner:
    """A whole compiled model (one device or HETERO) and its infer request."""

    def __init__(self, compiled: ov.CompiledModel, inputs: Sequence[ov.Tensor],
                 request: Optional[ov.InferRequest] = None) -> None:
        """Create the request (or reuse ``request``) and set its inputs.

        Raises ``StageFailure('compile')`` on an OpenVINO error.
        """
        with ov_errors("compile", "creating the infer request failed"):
            self.request = request if request is not None else compiled.create_infer_request()
            self._n_outputs = len(compiled.outputs)
        self.set_inputs(inputs)

    def set_inputs(self, inputs: Sequence[ov.Tensor]) -> None:
        """Feed the next inferences with ``inputs`` (model input order)."""
        with ov_errors("compile", "setting the model inputs failed"):
            for i, tensor in enumerate(inputs):
                self.request.set_input_tensor(i, tensor)

    def infer(self) -> None:
        """Run one inference (raises StageFailure('infer') on an OpenVINO error)."""
        with ov_errors("infer", "inference failed"):
            self.request.infer()

    def outputs(self) -> list[np.ndarray]:
        """Copies of the model outputs of the last inference."""
        return [self.request.get_output_tensor(i).data.copy() for i in range(self._n_outputs)]


class PipelineRunner:
    """Compiled stages run in order; tensors are handed over without copies."""

    def __init__(
        self,
        stages: Sequence[Union[Stage, CachedStage]],
        compiled: Sequence[ov.CompiledModel],
        sources: dict[TensorKey, ov.Tensor],
        output_keys: Sequence[TensorKey],
        requests: Optional[Sequence[Optional[ov.InferRequest]]] = None,
    ) -> None:
        """Create one request per stage, or reuse the given ones (``None`` = create).

        ``stages`` need only ``inputs`` and ``outputs`` (a :class:`Stage` or a
        cached stage). Raises ``StageFailure('compile')`` on an OpenVINO error.
        """
        reuse = list(requests) if requests is not None else [None] * len(stages)
        with ov_errors("compile", "creating the stage infer requests failed"):
            self._steps = [(stage, r if r is not None else c.create_infer_request())
                           for stage, c, r in zip(stages, compiled, reuse)]
        self._store = dict(sources)
        self._output_keys = list(output_keys)

    def set_sources(self, sources: Mapping[TensorKey, ov.Tensor]) -> None:
        """Feed the next inferences with new model inputs (keyed like ``sources``)."""
        self._store.update(sources)

    @property
    def requests(self) -> list[ov.InferRequest]:
        """The stages' infer requests, in stage order."""
        return [request for _, request in self._steps]

    def infer(self) -> None:
        """Run every stage once, feeding each with the tensors of earlier stages."""
        store = self._store
        for stage, request in self._steps:
            inputs = [store[key] for key in stage.inputs]
            with ov_errors("infer", "stage pipeline inference failed"):
                for i, tensor in enumerate(inputs):
                    request.set_input_tensor(i, tensor)
                request.infer()
                outputs = [request.get_output_tensor(j) for j in range(len(stage.outputs))]
            store.update(zip(stage.outputs, outputs))

    def outputs(self) -> list[np.ndarray]:
        """Copies of the model outputs of the last inference."""
        return [self._store[key].data.copy() for key in self._output_keys]


Runner = Union[RequestRunner, PipelineRunner]


def random_inputs(model: ov.Model, seed: int) -> list[np.ndarray]:
    """Random data for every model input: N(0,1) floats, 0/1 for integers and booleans.

    0/1 keeps integer inputs valid as indices (token ids, token types), masks and flags.

    Raises:
        ValueError: for a dynamic input shape or an element type it cannot fill.
    """
    rng = np.random.default_rng(seed)
    arrays = []
    for port in model.inputs:
        shape, etype = port.get_partial_shape(), port.get_element_type()
        name = port.get_any_name() if port.get_names() else port.get_node().get_friendly_name()
        if shape.is_dynamic:
            raise ValueError(f"model input {name!r} has dynamic shape {shape}; "
                             "reshape the model to static shapes first")
        dims = tuple(shape.to_shape())
        if etype == ov.Type.boolean:
            arrays.append(rng.integers(0, 2, dims).astype(bool))
        elif etype.is_integral():
            arrays.append(rng.integers(0, 2, dims).astype(etype.to_dtype()))
        elif etype in (ov.Type.f32, ov.Type.f16, ov.Type.f64):
            arrays.append(rng.standard_normal(dims).astype(etype.to_dtype()))
        else:
            raise ValueError(f"model input {name!r} has element type {etype.get_type_name()}; "
                             "only f64/f32/f16, integer and boolean inputs can be filled with random data")
    return arrays
