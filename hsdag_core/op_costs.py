"""What an OpenVINO op costs, estimated from its type and static shapes: FLOPs
and tensor bytes (the node attributes :func:`hsdag_core.compgraph.from_ov_model`
records and modeled devices are timed from)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from hsdag_core.errors import GraphError

__all__ = ["flops", "numel", "static_shape", "tensor_bytes"]

_ELEMENTWISE = {"Add", "Multiply", "Subtract", "Divide", "Relu", "Sigmoid", "Tanh", "Clamp",
                "Maximum", "Minimum", "Power", "Exp", "Sqrt", "Erf", "Swish", "HSwish",
                "Mish", "Elu", "PRelu", "Abs", "Negative", "SquaredDifference", "Select"}
_HEAVY_ELEMENTWISE = {"Gelu": 8, "MVN": 6, "Softmax": 5, "SoftMax": 5, "NormalizeL2": 4,
                      "BatchNormInference": 2}


def numel(shape: Sequence[int]) -> int:
    return int(np.prod(shape)) if len(shape) else 1


def static_shape(output) -> list[int]:
    ps = output.get_partial_shape()
    if ps.is_dynamic:
        raise GraphError(
            f"op {output.get_node().get_friendly_name()!r} has a dynamic output shape {ps}; "
            "give the model static input shapes (reshape it) before placing it")
    return [int(d) for d in ps.to_shape()]


def flops(op) -> float:
    """A FLOP estimate from the op type and static shapes (0 if unknown)."""
    t = op.get_type_name()
    out = static_shape(op.output(0)) if op.get_output_size() else []
    n_out = numel(out)
    if t in ("Convolution", "GroupConvolution", "ConvolutionBackpropData"):
        w = static_shape(op.input_value(1))
        # Convolution weights [Cout, Cin, k...]; GroupConvolution [G, Cout/G, Cin/G, k...]
        per_out = numel(w[2:]) if t == "Convolution" else numel(w[3:])
        cin = w[1] if t == "Convolution" else w[2]
        return 2.0 * n_out * cin * per_out
    if t == "MatMul":
        a = static_shape(op.input_value(0))
        ta = bool(op.get_attributes().get("transpose_a", False))
        k = a[-2] if (ta and len(a) > 1) else a[-1]
        return 2.0 * n_out * k
    if t == "ScaledDotProductAttention":
        q = static_shape(op.input_value(0))
        kk = static_shape(op.input_value(1))
        return 4.0 * numel(q[:-1]) * kk[-2] * q[-1]
    if t in ("MaxPool", "AvgPool"):
        k = op.get_attributes().get("kernel", [1])
        return float(n_out * numel(list(k)))
    if t in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceProd"):
        return float(numel(static_shape(op.input_value(0))))
    if t in _HEAVY_ELEMENTWISE:
        return float(_HEAVY_ELEMENTWISE[t] * n_out)
    if t in _ELEMENTWISE:
        return float(n_out)
    return 0.0


def tensor_bytes(output) -> float:
    return float(numel(static_shape(output)) * output.get_element_type().size)
