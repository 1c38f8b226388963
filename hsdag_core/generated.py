"""Graphs generated directly as OpenVINO models (no conversion): ``gen:`` model specs.

``gen:layered:n=N:c=C:w=W:seed=S``
    a random layered DAG of ``N`` conv nodes: node ``i`` reads up to two
    earlier nodes among the ``W`` before it (always ``i-1``), concatenates
    them, and applies a ``k x k`` convolution (``k`` 1 or 3) to a random width
    in ``C/4 .. 2C`` channels plus a ReLU; the sinks are pooled into the output.
``gen:cell:cells=L:b=B:c=C:seed=S``
    an ENAS/NASNet-like network: ``L`` copies of one random cell of ``B``
    nodes (each node adds two operations, separable 3x3/5x5 convolution, 3x3
    average/max pool, 1x1 convolution or identity, on two earlier states), the
    cell's unused states concatenated and projected back to ``C`` channels;
    the architecture is drawn from ``seed``.

Both take ``size=`` (input height and width, default 32). The same spec always
gives the same model. :mod:`hsdag_core.families` names sets of them.
"""
from __future__ import annotations

import numpy as np

from hsdag_core.errors import GraphError

__all__ = ["generated_model", "is_generated", "GEN_PREFIX"]

GEN_PREFIX = "gen:"


def is_generated(spec: str) -> bool:
    return spec.startswith(GEN_PREFIX)


def _parse(spec: str) -> tuple[str, dict[str, int]]:
    parts = spec[len(GEN_PREFIX):].split(":")
    kind, params = parts[0], {}
    for p in parts[1:]:
        key, _, value = p.partition("=")
        try:
            params[key] = int(value)
        except ValueError:
            raise GraphError(f"bad generated model {spec!r}: {p!r} is not KEY=INTEGER") from None
    return kind, params


def generated_model(spec: str):
    """The ``openvino.Model`` of a ``gen:`` spec (see the module docstring); deterministic."""
    kind, p = _parse(spec)
    try:
        if kind == "layered":
            return _layered(spec, p.pop("n"), p.pop("c", 32), p.pop("w", 8), p.pop("seed", 0),
                            p.pop("size", 32))
        if kind == "cell":
            return _cells(spec, p.pop("cells", 3), p.pop("b", 4), p.pop("c", 32),
                          p.pop("seed", 0), p.pop("size", 32))
    except KeyError as e:
        raise GraphError(f"generated model {spec!r} needs {e.args[0]}=...") from None
    raise GraphError(f"unknown generated model kind {kind!r} in {spec!r}; use gen:layered:n=N:... "
                     "or gen:cell:cells=L:...")


class _Builder:
    """Small helpers over ``openvino.opset13`` with unique op names and seeded weights."""

    def __init__(self, seed: int) -> None:
        from openvino import opset13

        self.ops = opset13
        self.rng = np.random.default_rng(seed)
        self.count = 0

    def name(self, what: str) -> str:
        self.count += 1
        return f"{what}{self.count}"

    def conv(self, x, cin: int, cout: int, k: int, groups: int = 1):
        ops, nm = self.ops, self.name("conv")
        pad = [k // 2, k // 2]
        if groups == 1:
            w = (self.rng.standard_normal((cout, cin, k, k)) * (2.0 / (cin * k * k)) ** 0.5)
            return ops.convolution(x, ops.constant(w.astype(np.float32), name=nm + "/w"),
                                   [1, 1], pad, pad, [1, 1], name=nm)
        w = self.rng.standard_normal((groups, cout // groups, cin // groups, k, k)) * (2.0 / (k * k)) ** 0.5
        return ops.group_convolution(x, ops.constant(w.astype(np.float32), name=nm + "/w"),
                                     [1, 1], pad, pad, [1, 1], name=nm)

    def relu(self, x):
        return self.ops.relu(x, name=self.name("relu"))

    def concat(self, xs):
        return xs[0] if len(xs) == 1 else self.ops.concat(xs, 1, name=self.name("concat"))

    def finish(self, outs, spec: str):
        import openvino as ov

        ops = self.ops
        pooled = ops.reduce_mean(self.concat(outs), ops.constant(np.array([2, 3], np.int64),
                                                                 name="pool/axes"),
                                 False, name="pool")
        model = ov.Model([ops.result(pooled, name="out")], [self.input], spec)
        model.set_friendly_name(spec)
        return model


def _layered(spec: str, n: int, c: int, window: int, seed: int, size: int):
    if n < 2 or c < 4 or window < 1:
        raise GraphError(f"generated model {spec!r} needs n >= 2, c >= 4 and w >= 1")
    b = _Builder(seed)
    x = b.input = b.ops.parameter([1, 3, size, size], np.float32, name="input")
    outs, widths, used = [], [], set()
    choices = [max(4, c // 4), max(4, c // 2), c, 2 * c]
    for i in range(n):
        if i == 0:
            parents = []
        else:
            k = min(i, window)
            parents = sorted({i - 1, i - 1 - int(b.rng.integers(0, k))})
        used.update(parents)
        inp = b.concat([outs[j] for j in parents]) if parents else x
        cin = sum(widths[j] for j in parents) if parents else 3
        cout = int(b.rng.choice(choices))
        k = int(b.rng.choice([1, 3, 3]))
        outs.append(b.relu(b.conv(inp, cin, cout, k)))
        widths.append(cout)
    return b.finish([o for i, o in enumerate(outs) if i not in used], spec)


#: operations of a NAS cell
_CELL_OPS = ("sep3", "sep5", "avg3", "max3", "conv1", "identity")


def _cells(spec: str, cells: int, nodes: int, c: int, seed: int, size: int):
    if cells < 1 or nodes < 1 or c < 4:
        raise GraphError(f"generated model {spec!r} needs cells >= 1, b >= 1 and c >= 4")
    b = _Builder(seed)
    ops = b.ops
    # the architecture: per node two (input state, operation) pairs
    arch = [[(int(b.rng.integers(0, j + 2)), _CELL_OPS[int(b.rng.integers(0, len(_CELL_OPS)))])
             for _ in range(2)] for j in range(nodes)]
    x = b.input = ops.parameter([1, 3, size, size], np.float32, name="input")
    stem = b.relu(b.conv(x, 3, c, 3))
    prev2, prev = stem, stem

    def apply(h, op):
        if op == "identity":
            return h
        if op in ("sep3", "sep5"):
            k = 3 if op == "sep3" else 5
            return b.conv(b.relu(b.conv(b.relu(h), c, c, k, groups=c)), c, c, 1)
        if op == "avg3":
            return ops.avg_pool(h, [1, 1], [1, 1], [1, 1], [3, 3], True, name=b.name("avgpool"))
        if op == "max3":
            return ops.max_pool(h, [1, 1], [1, 1], [1, 1], [1, 1], [3, 3], name=b.name("maxpool")).output(0)
        return b.relu(b.conv(h, c, c, 1))

    for _ in range(cells):
        states = [prev2, prev]
        used: set[int] = set()
        for pairs in arch:
            terms = [apply(states[src], op) for src, op in pairs]
            used.update(src for src, _ in pairs)
            states.append(ops.add(terms[0], terms[1], name=b.name("add")))
        loose = [s for k, s in enumerate(states) if k >= 2 and k not in used]
        out = b.relu(b.conv(b.concat(loose), c * len(loose), c, 1))
        prev2, prev = prev, out
    return b.finish([prev], spec)
