"""Placement graphs of PyTorch models, from ``torch.export``: the graph source of the torch backend.

A :class:`TorchProgram` is a model exported with ``torch.export`` and functionalised
(``run_decompositions({})``: in-place ATen ops become their functional forms, so a
tensor copied to another device never misses a later in-place update), as one
``torch.fx.GraphModule`` that takes the inputs as flat positional tensors, keeps the
parameters as attributes (``get_attr`` nodes) and returns a flat tuple.

:func:`from_torch_program` turns it into the same :class:`~hsdag_core.compgraph.CompGraph`
the OpenVINO source gives: every ATen op whose value depends on the inputs is a node;
parameters (``get_attr``), inputs (``placeholder``) and ops computed from parameters
alone are attached to their first consumer, and ``getitem`` (one output of a
multi-output op) to the op it reads. ``Node.ops`` holds fx node names, so a placement
expands to a device for every fx node by name. Op types are named in the OpenVINO
vocabulary of :data:`hsdag_core.features.OP_VOCAB` where one exists (``aten.conv2d`` is
``Convolution``, ``aten.linear`` is ``MatMul``...), so node features mean the same
whichever source built the graph; FLOPs and bytes come from the shapes ATen recorded
(``node.meta["val"]``). Coarsening, features, profiles, the simulator and every method
then work on it unchanged.

Models (:func:`load_program`): the zoo names, ``tv:NAME`` and ``hf:TYPE`` as for OpenVINO
(:mod:`hsdag_core.models`), and a user's own ``nn.Module`` as ``py:package.module:factory``:
``factory()`` returns the module (then ``--input-shape`` gives its float input's shape),
or ``(module, example_inputs)`` with a tuple of tensors or a dict of keyword tensors.
Nothing here imports OpenVINO or Ray.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from hsdag_core.compgraph import CompGraph, Edge, Node
from hsdag_core.errors import GraphError
from hsdag_core.user_models import PY_PREFIX, user_factory

__all__ = ["TorchProgram", "load_program", "export_program", "from_torch_program", "tiny_cnn_module",
           "PY_PREFIX", "is_torch_spec", "aten_op_type", "program_from_exported"]

#: ATen op (without overload) -> op type of the OpenVINO vocabulary
_OP_TYPES = {
    "conv1d": "Convolution", "conv2d": "Convolution", "conv3d": "Convolution",
    "convolution": "Convolution", "linear": "MatMul", "mm": "MatMul", "bmm": "MatMul",
    "matmul": "MatMul", "addmm": "MatMul", "baddbmm": "MatMul", "einsum": "MatMul",
    "add": "Add", "mul": "Multiply", "sub": "Subtract", "rsub": "Subtract", "div": "Divide",
    "relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "gelu": "Gelu", "silu": "Swish",
    "hardswish": "HSwish", "hardsigmoid": "Sigmoid", "clamp": "Clamp", "hardtanh": "Clamp",
    "exp": "Exp", "sqrt": "Sqrt", "rsqrt": "Sqrt", "pow": "Power",
    "max_pool2d": "MaxPool", "max_pool2d_with_indices": "MaxPool", "avg_pool2d": "AvgPool",
    "adaptive_avg_pool2d": "AvgPool", "mean": "ReduceMean", "sum": "ReduceSum", "amax": "ReduceMax",
    "layer_norm": "MVN", "native_layer_norm": "MVN", "group_norm": "MVN", "native_group_norm": "MVN",
    "softmax": "Softmax", "_softmax": "Softmax", "log_softmax": "Softmax",
    "batch_norm": "BatchNormInference", "_native_batch_norm_legit_no_training": "BatchNormInference",
    "cat": "Concat", "split": "Split", "split_with_sizes": "VariadicSplit", "chunk": "Split",
    "unbind": "Split", "view": "Reshape", "reshape": "Reshape", "flatten": "Reshape",
    "_unsafe_view": "Reshape", "permute": "Transpose", "transpose": "Transpose", "t": "Transpose",
    "squeeze": "Squeeze", "unsqueeze": "Unsqueeze", "embedding": "Gather", "index_select": "Gather",
    "index": "Gather", "gather": "Gather", "select": "Gather", "slice": "Slice", "narrow": "Slice",
    "expand": "Broadcast", "repeat": "Broadcast", "upsample_nearest2d": "Interpolate",
    "upsample_bilinear2d": "Interpolate", "scaled_dot_product_attention": "ScaledDotProductAttention",
    "_to_copy": "Convert", "to": "Convert", "type_as": "Convert", "where": "Select",
    "constant_pad_nd": "Pad", "pad": "Pad",
}

_MATMULS = {"mm", "bmm", "matmul", "addmm", "baddbmm"}


@dataclass
class TorchProgram:
    """A model exported for placement (see the module docstring).

    Attributes:
        name: the model's name (its spec).
        gm: the functional ATen graph: flat positional tensor inputs, parameters as
            attributes, a flat tuple of outputs.
        example_inputs: one tensor per input of ``gm``, in order (random data).
        module: the original ``nn.Module`` in eval mode (what Accelerate's device map
            reads, by its submodules' names).
        input_names: the inputs' names, in order.
        exported: the functional ``torch.export.ExportedProgram`` ``gm`` was made from (what
            a saved placed program stores, ``torch.export.save``).
    """

    name: str
    gm: Any
    example_inputs: tuple
    module: Any
    input_names: list[str] = field(default_factory=list)
    exported: Any = None

    def parameter_bytes(self) -> float:
        return float(sum(p.numel() * p.element_size() for p in self.gm.parameters())
                     + sum(b.numel() * b.element_size() for b in self.gm.buffers()))


def is_torch_spec(spec: str) -> bool:
    """Whether ``spec`` names a model only the torch source reads (``py:...``)."""
    return spec.startswith(PY_PREFIX)


def tiny_cnn_module(channels: int = 16, size: int = 32, blocks: int = 3, seed: int = 0):
    """The zoo's ``tiny_cnn`` as a PyTorch module: a stem, ``blocks`` residual blocks of
    two 3x3 convolutions with ReLU, global pooling and a linear head, random weights; a
    few milliseconds per inference, the debug model of tests. Returns ``(module,
    example input)``."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Conv2d(channels, channels, 3, padding=1)
            self.b = nn.Conv2d(channels, channels, 3, padding=1)

        def forward(self, x):
            return torch.relu(x + self.b(torch.relu(self.a(x))))

    class TinyCNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Conv2d(3, channels, 3, padding=1)
            self.blocks = nn.Sequential(*[Block() for _ in range(blocks)])
            self.head = nn.Linear(channels, 10)

        def forward(self, x):
            x = self.blocks(torch.relu(self.stem(x)))
            return self.head(x.mean(dim=(2, 3)))

    torch.manual_seed(seed)
    return TinyCNN().eval(), torch.randn(1, 3, size, size)


def load_program(spec: str, input_shapes=None) -> TorchProgram:
    """Build and export the model ``spec`` names (see the module docstring).

    ``input_shapes``: a shape list for a ``py:`` factory that returns only the module
    (its one float input), or ``{name: shape}`` resizing a zoo / ``hf:`` model's inputs.
    Raises :class:`GraphError` with one sentence for anything that cannot be built.
    """
    import torch

    from hsdag_core.models import _builder

    if spec.startswith("gen:"):
        raise GraphError(f"{spec} is a generated OpenVINO graph; the torch backend measures PyTorch "
                         "models (a zoo name, tv:NAME, hf:TYPE or py:package.module:factory)")
    if spec.lower().endswith((".xml", ".onnx")):
        raise GraphError(f"{spec} is an OpenVINO/ONNX file; the torch backend measures PyTorch models "
                         "(a zoo name, tv:NAME, hf:TYPE or py:package.module:factory)")
    if is_torch_spec(spec):
        module, example = user_factory(spec)
        if not isinstance(module, torch.nn.Module):
            raise GraphError(f"{spec}: the factory returned {type(module).__name__}, not an "
                             "nn.Module (or a tuple (module, example_inputs))")
        if example is None:
            if not isinstance(input_shapes, (list, tuple)):
                raise GraphError(f"{spec} returns a module without example inputs; give its input "
                                 "shape with --input-shape, e.g. 1,3,224,224")
            example = torch.randn(*input_shapes)
    elif spec == "tiny_cnn":
        module, example = tiny_cnn_module()
    else:
        build = _builder(spec)
        if build is None:
            raise GraphError(f"unknown model {spec!r} for the torch backend; give a zoo name, "
                             "tv:NAME, hf:TYPE or py:package.module:factory")
        module, example, _ = build()
    if isinstance(input_shapes, dict) and isinstance(example, dict):
        example = {k: (torch.ones(input_shapes[k], dtype=v.dtype) if not v.is_floating_point()
                       else torch.randn(input_shapes[k])) if k in input_shapes else v
                   for k, v in example.items()}
    return export_program(spec, module.eval(), example)


def export_program(name: str, module, example) -> TorchProgram:
    """Export ``module`` on ``example`` (a tensor, a tuple of tensors or a dict of keyword
    tensors) as a :class:`TorchProgram`."""
    import torch

    args, kwargs = ((), dict(example)) if isinstance(example, dict) else \
        ((example,) if isinstance(example, torch.Tensor) else tuple(example), {})
    try:
        with torch.no_grad():
            ep = torch.export.export(module, args, kwargs=kwargs, strict=False)
            ep = ep.run_decompositions({})
    except Exception as e:  # the exporter raises many kinds with pages of text
        first = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
        raise GraphError(f"torch.export cannot export {name}: {first[:300]}") from None
    return program_from_exported(name, ep, module, list(args) + [kwargs[k] for k in kwargs])


def program_from_exported(name: str, ep, module, flat_inputs) -> TorchProgram:
    """The :class:`TorchProgram` of a functional ``ExportedProgram`` ``ep`` (also one loaded
    with ``torch.export.load``) and its flat example inputs."""
    import torch
    from torch.fx.graph import CodeGen

    gm = ep.module()
    graph = gm.graph
    for node in list(graph.nodes):  # the input guard checks shapes we fix anyway
        if node.op == "call_module" and not node.users:
            graph.erase_node(node)
    for node in list(graph.nodes):  # shape assertions: no value, nothing to place
        if (node.op == "call_function" and not node.users
                and getattr(node.target, "__name__", "").startswith("_assert")):
            graph.erase_node(node)
    graph._codegen = CodeGen()  # flat positional inputs, no pytree
    # a plain GraphModule: no input-checking hooks of the exported module's
    gm = torch.fx.GraphModule(gm, graph, class_name=type(module).__name__ if module is not None else "Program")
    gm.eval()
    flat = list(flat_inputs)
    names = [n.name for n in graph.nodes if n.op == "placeholder"]
    if len(names) != len(flat):
        raise GraphError(f"{name}: the exported graph reads {len(names)} inputs, the example gives "
                         f"{len(flat)}")
    return TorchProgram(name=name, gm=gm, example_inputs=tuple(flat), module=module,
                        input_names=names, exported=ep)


# ----------------------------------------------------------------- the graph
def aten_op_type(node) -> str:
    """The op type of an fx node: the OpenVINO vocabulary's name where one exists, else the
    ATen op's own name."""
    target = node.target
    if target is operator.getitem:
        return "getitem"
    name = getattr(target, "__name__", str(target)).split(".")[0]
    schema = getattr(target, "_schema", None)
    if schema is not None:
        name = schema.name.split("::")[-1]
    name = name.rstrip("_") or name
    kind = _OP_TYPES.get(name, name)
    if kind == "Convolution" and len(node.args) > 6 and node.args[6] not in (1, None):
        return "GroupConvolution"
    return kind


def _vals(val) -> list:
    import torch

    if isinstance(val, torch.Tensor):
        return [val]
    if isinstance(val, (list, tuple)):
        return [v for x in val for v in _vals(x)]
    return []


def _bytes(t) -> float:
    return float(t.numel() * t.element_size())


def _flops(node, kind: str, outs: list, ins: list) -> float:
    out_numel = float(sum(o.numel() for o in outs))
    name = getattr(getattr(node.target, "_schema", None), "name", "").split("::")[-1]
    if kind in ("Convolution", "GroupConvolution") and len(ins) >= 2:
        w = ins[1]
        return 2.0 * out_numel * float(np.prod(w.shape[1:]))
    if kind == "MatMul" and ins:
        if name in ("linear",) and len(ins) >= 2:
            return 2.0 * out_numel * float(ins[1].shape[-1])
        if name == "addmm" and len(ins) >= 3:
            return 2.0 * out_numel * float(ins[1].shape[-1])
        if name == "baddbmm" and len(ins) >= 3:
            return 2.0 * out_numel * float(ins[1].shape[-1])
        return 2.0 * out_numel * float(ins[0].shape[-1])
    if kind == "ScaledDotProductAttention" and len(ins) >= 3:
        q, k = ins[0], ins[1]
        return 4.0 * float(np.prod(q.shape[:-1])) * float(k.shape[-2]) * float(q.shape[-1])
    return out_numel


def from_torch_program(program: TorchProgram, name: Optional[str] = None) -> CompGraph:
    """The placement graph of ``program`` (see the module docstring)."""
    import torch.fx as fx

    fx_nodes = list(program.gm.graph.nodes)
    # data_dependent: the value depends on the model's inputs
    dependent = {}
    kind: dict[Any, str] = {}
    for n in fx_nodes:
        ins = [a for a in n.all_input_nodes]
        if n.op == "placeholder":
            dependent[n], kind[n] = True, "input"
        elif n.op == "get_attr":
            dependent[n], kind[n] = False, "param"
        elif n.op == "output":
            dependent[n], kind[n] = True, "output"
        elif n.op == "call_function" and n.target is operator.getitem:
            dependent[n] = dependent.get(n.args[0], False)
            kind[n] = "item" if dependent[n] else "const"
        elif n.op in ("call_function", "call_method", "call_module"):
            dependent[n] = any(dependent.get(a, False) for a in ins)
            kind[n] = "compute" if dependent[n] else "const"
        else:
            dependent[n], kind[n] = False, "const"
    node_of: dict[Any, int] = {}
    nodes: list[Node] = []
    for n in fx_nodes:
        if kind[n] != "compute":
            continue
        outs = _vals(n.meta.get("val"))
        ins = [v for a in n.args for v in (_vals(a.meta.get("val")) if isinstance(a, fx.Node) else [])]
        op_type = aten_op_type(n)
        node_of[n] = len(nodes)
        nodes.append(Node(
            name=n.name, op_type=op_type, ops=[n.name],
            output_shapes=[list(o.shape) for o in outs],
            output_types=[str(o.dtype).replace("torch.", "") for o in outs],
            flops=_flops(n, op_type, outs, ins),
            bytes_read=float(sum(_bytes(v) for a in n.all_input_nodes for v in _vals(a.meta.get("val")))),
            bytes_written=float(sum(_bytes(o) for o in outs)), members=[n.name]))
    if not nodes:
        raise GraphError(f"{program.name} has no op that reads its inputs, nothing to place")
    # getitem -> the op it reads; params, inputs and constant ops -> their first consumer
    for n in fx_nodes:
        if kind[n] == "item":
            node_of[n] = node_of[n.args[0]] if n.args[0] in node_of else -1
    for n in reversed(fx_nodes):
        if kind[n] in ("param", "input", "const"):
            owners = [node_of[u] for u in n.users if node_of.get(u, -1) >= 0]
            node_of[n] = min(owners) if owners else -1
    for n in fx_nodes:
        if kind[n] == "item" and node_of[n] < 0:
            node_of[n] = 0
        if kind[n] == "output":
            srcs = [node_of[a] for a in n.all_input_nodes if node_of.get(a, -1) >= 0]
            node_of[n] = max(srcs) if srcs else len(nodes) - 1
    for n in fx_nodes:
        if kind[n] == "compute":
            continue
        i = node_of.get(n, -1)
        if i < 0:
            i = 0 if kind[n] != "output" else len(nodes) - 1
            node_of[n] = i
        nodes[i].ops.append(n.name)
        if kind[n] == "param":
            nodes[i].weight_bytes += sum(_bytes(v) for v in _vals(n.meta.get("val")))
    edges: list[Edge] = []
    seen: set[tuple[int, int, int]] = set()
    for n in fx_nodes:
        if kind[n] != "compute":
            continue
        for a in n.all_input_nodes:
            if kind[a] == "item" and kind.get(a.args[0]) == "compute":
                src, port, val = a.args[0], int(a.args[1]), a.meta.get("val")
            elif kind[a] == "compute":
                src, port, val = a, 0, _vals(a.meta.get("val"))[:1]
                val = val[0] if val else None
            else:
                continue
            key = (node_of[src], port, node_of[n])
            if key in seen or key[0] == key[2]:
                continue
            seen.add(key)
            t = _vals(val)
            edges.append(Edge(src=key[0], dst=key[2], port=port,
                              shape=list(t[0].shape) if t else [],
                              dtype=str(t[0].dtype).replace("torch.", "") if t else "",
                              bytes=float(sum(_bytes(x) for x in t))))
    return CompGraph(name or program.name, nodes, edges)
