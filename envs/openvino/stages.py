"""A placement cut into stages: contiguous runs of compute ops on one device, each its own model.

The stage pipeline runs a placement without HETERO: the model's compute ops,
in ``get_ordered_ops()`` order, are cut wherever the device changes; each stage
becomes an ``ov.Model`` with a Parameter for every tensor it receives and a
Result for every tensor a later stage or a model output needs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, NamedTuple

import openvino as ov
from openvino import opset13

__all__ = ['STRUCTURAL_OPS', 'Stage', 'StagePlan', 'TensorKey', 'complete_affinity', 'plan_stages', 'split_stages']

TensorKey = tuple[str, int]
"""A tensor of the original model: (producer's friendly name, output index)."""

STRUCTURAL_OPS = frozenset({"Parameter", "Constant", "Result"})
"""Op types that compute nothing; the pipeline places them with their users."""


class StagePlan(NamedTuple):
    """One stage of a placement: a device and its compute ops, in model order."""

    device: str
    ops: list[str]


@dataclass
class Stage:
    """One stage of the pipeline, built as its own model.

    Attributes:
        device: where it runs.
        model: the stage's ``ov.Model``; its parameters and results are in the
            order of ``inputs`` and ``outputs``.
        inputs: original tensors fed to the stage's parameters.
        outputs: original tensors the stage's results produce (those used by a
            later stage or a model output).
        ops: friendly names of its compute ops.
    """

    device: str
    model: ov.Model
    inputs: list[TensorKey]
    outputs: list[TensorKey]
    ops: list[str]


def plan_stages(model: ov.Model, affinity: Mapping[str, str]) -> list[StagePlan]:
    """Cut the compute ops (all but Parameter/Constant/Result) into stages.

    Walks ``model.get_ordered_ops()`` and starts a new stage wherever the
    device of a compute op differs from the previous compute op's.

    Returns:
        The stages in execution order (empty for a model without compute ops).
    """
    plans: list[StagePlan] = []
    for op in model.get_ordered_ops():
        if op.get_type_name() in STRUCTURAL_OPS:
            continue
        name = op.get_friendly_name()
        device = affinity[name]
        if not plans or plans[-1].device != device:
            plans.append(StagePlan(device, []))
        plans[-1].ops.append(name)
    return plans


def split_stages(model: ov.Model, affinity: Mapping[str, str]) -> tuple[list[Stage], list[TensorKey]]:
    """Split ``model`` into stage models following :func:`plan_stages`.

    Works on a clone (``model`` is not changed). Each stage gets a new
    ``opset13.parameter`` for every tensor entering from an earlier stage or a
    model input, and an ``opset13.result`` for every tensor a later stage or a
    model output uses. Constants stay with each consumer, so a constant used by
    several stages appears in each of them. Friendly names must be unique.

    Raises:
        ValueError: for a stateful model (its Assign sinks have no outputs to pass on).

    Returns:
        The stages, and the tensor behind each model output, in output order.
    """
    if model.get_sinks():
        raise ValueError("stateful models (ReadValue/Assign) cannot be split into stages")
    plans = plan_stages(model, affinity)
    stage_of = {name: s for s, plan in enumerate(plans) for name in plan.ops}
    work = model.clone()
    by_name = {op.get_friendly_name(): op for op in work.get_ordered_ops()}
    params: list[dict[TensorKey, ov.Node]] = [{} for _ in plans]
    needed: list[dict[TensorKey, ov.Output]] = [{} for _ in plans]
    for s, plan in enumerate(plans):
        for name in plan.ops:
            for inp in by_name[name].inputs():
                src = inp.get_source_output()
                producer = src.get_node()
                pname = producer.get_friendly_name()
                if producer.get_type_name() == "Constant" or stage_of.get(pname) == s:
                    continue
                key = (pname, src.get_index())
                if key not in params[s]:
                    params[s][key] = opset13.parameter(
                        src.get_partial_shape(), src.get_element_type(), name=f"{pname}:{key[1]}"
                    )
                    if pname in stage_of:
                        needed[stage_of[pname]][key] = src
                inp.replace_source_output(params[s][key].output(0))
    output_keys: list[TensorKey] = []
    for result in work.get_results():
        src = result.input_value(0)
        key = (src.get_node().get_friendly_name(), src.get_index())
        output_keys.append(key)
        if key[0] in stage_of:
            needed[stage_of[key[0]]][key] = src
    stages = []
    for s, plan in enumerate(plans):
        results = [opset13.result(out) for out in needed[s].values()]
        stage_model = ov.Model(results, list(params[s].values()), f"{model.get_friendly_name()}_stage{s}")
        stages.append(Stage(plan.device, stage_model, list(params[s]), list(needed[s]), plan.ops))
    return stages, output_keys


def complete_affinity(model: ov.Model, affinity: Mapping[str, str]) -> dict[str, str]:
    """Fill in the structural ops of a compute-op affinity.

    Constants and Parameters get the device of their first consumer (in
    ``get_ordered_ops()`` order) that has one,
    Results the device of their producer. Entries already given are kept;
    compute ops missing from ``affinity`` stay missing (and so does a source
    that only feeds Results).

    Returns:
        A new affinity dict.
    """
    full = dict(affinity)
    ops = model.get_ordered_ops()
    position = {op.get_friendly_name(): i for i, op in enumerate(ops)}
    for op in ops:
        name = op.get_friendly_name()
        if name in full or op.get_type_name() not in ("Constant", "Parameter"):
            continue
        consumers = sorted((i.get_node().get_friendly_name()
                            for out in op.outputs() for i in out.get_target_inputs()),
                           key=position.__getitem__)
        device = next((full[c] for c in consumers if c in full), None)
        if device is not None:
            full[name] = device
    for op in ops:  # after the sources, so a Result fed by a Parameter gets its device
        name = op.get_friendly_name()
        if op.get_type_name() != "Result" or name in full:
            continue
        producer = op.input_value(0).get_node().get_friendly_name()
        if producer in full:
            full[name] = full[producer]
    return full
