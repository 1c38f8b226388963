"""The model zoo and loading of user models as static-shape ``openvino.Model``.

Names understood by :func:`load_model`:

``resnet50``, ``inception_v3``
    torchvision models with random weights (batch 1, 224x224 / 299x299).
``bert_base``
    Hugging Face ``BertModel(BertConfig())`` with random weights, batch 1,
    sequence length 128.
``tiny_cnn``
    a small residual CNN built directly with ``openvino.opset13`` (a few
    milliseconds per inference): the debug model of tests and quick runs.
``tv:NAME``
    any torchvision model by its builder name (``tv:mobilenet_v3_small``,
    ``tv:efficientnet_b0``, ``tv:vit_b_16``, ``tv:convnext_tiny`` ...), random
    weights, batch 1, 224x224 (299x299 for Inception).
``gen:KIND:...``
    a generated graph of a family (random layered DAG, NAS cells; see
    :mod:`hsdag_core.generated`), built directly, no conversion.
``hf:TYPE[:KEY=VALUE...]``
    any Hugging Face model type buildable from its default config without a
    download, text (``hf:gpt2``, ``hf:distilbert``, ``hf:roberta``, ``hf:t5``
    ...: sequence length 128, ``seq=N`` to change it) or vision (``hf:vit``,
    ``hf:swin``, ``hf:convnext`` ...), random weights, batch 1, the base model
    (no task head); ``KEY=VALUE`` sets config fields
    (``hf:llama:num_hidden_layers=2``), see :mod:`hsdag_core.hf_models`.
a path ending in ``.xml`` (OpenVINO IR, ``.bin`` beside it) or ``.onnx``
    loaded with OpenVINO; dynamic inputs must be given static shapes with
    ``input_shapes``.

Converted zoo models are cached as IR under ``$HSDAG_RAY_CACHE`` (default
``~/.cache/hsdag_ray/models``); conversion takes 10-20 s once.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from hsdag_core.errors import GraphError

__all__ = ["ZOO", "MODEL_HELP", "load_model", "cache_dir", "tiny_cnn", "openvino_error_text"]

#: what a command's model argument accepts, for its --help
MODEL_HELP = ("zoo name (resnet50, inception_v3, bert_base, tiny_cnn), tv:NAME (a torchvision "
              "architecture), hf:TYPE (a Hugging Face model type), gen:KIND:... (a generated "
              "graph), all with random weights, a .xml / .onnx file, doppler:FILE.txt (one of "
              "DOPPLER's compute graphs, with the simulator), or with --backend torch "
              "py:package.module:factory (your own nn.Module)")


def cache_dir() -> Path:
    return Path(os.environ.get("HSDAG_RAY_CACHE", Path.home() / ".cache" / "hsdag_ray")) / "models"


def _resnet50():
    import torch
    import torchvision

    m = torchvision.models.resnet50(weights=None).eval()
    return m, torch.randn(1, 3, 224, 224), [1, 3, 224, 224]


def _inception_v3():
    import torch
    import torchvision

    m = torchvision.models.inception_v3(weights=None, aux_logits=False, init_weights=False).eval()
    return m, torch.randn(1, 3, 299, 299), [1, 3, 299, 299]


def _bert_base():
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    m = BertModel(BertConfig()).eval()
    ids = torch.ones(1, 128, dtype=torch.long)
    example = {"input_ids": ids, "attention_mask": ids, "token_type_ids": torch.zeros_like(ids)}
    return m, example, {k: [1, 128] for k in example}


def tiny_cnn(channels: int = 16, size: int = 32, blocks: int = 3, seed: int = 0):
    """A small residual CNN as an ``openvino.Model`` (no conversion needed).

    stem conv -> ``blocks`` x (conv-relu-conv + skip, relu) -> a side branch
    (1x1 conv) concatenated -> global average pool -> matmul classifier.
    """
    import openvino as ov
    from openvino import opset13 as ops

    rng = np.random.default_rng(seed)

    def conv(x, cin, cout, k, name):
        w = ops.constant((rng.standard_normal((cout, cin, k, k)) * (2.0 / (cin * k * k)) ** 0.5)
                         .astype(np.float32), name=f"{name}/weights")
        pad = k // 2
        c = ops.convolution(x, w, [1, 1], [pad, pad], [pad, pad], [1, 1], name=name)
        return c

    x = ops.parameter([1, 3, size, size], np.float32, name="input")
    h = ops.relu(conv(x, 3, channels, 3, "stem"), name="stem/relu")
    for b in range(blocks):
        y = ops.relu(conv(h, channels, channels, 3, f"block{b}/conv1"), name=f"block{b}/relu1")
        y = conv(y, channels, channels, 3, f"block{b}/conv2")
        h = ops.relu(ops.add(y, h, name=f"block{b}/add"), name=f"block{b}/relu2")
    side = ops.relu(conv(h, channels, channels, 1, "side/conv"), name="side/relu")
    cat = ops.concat([h, side], 1, name="concat")
    pooled = ops.reduce_mean(cat, ops.constant(np.array([2, 3], dtype=np.int64), name="pool/axes"),
                             False, name="pool")
    w = ops.constant(rng.standard_normal((2 * channels, 10)).astype(np.float32) * 0.1, name="fc/weights")
    logits = ops.matmul(pooled, w, False, False, name="fc")
    return ov.Model([ops.result(logits, name="logits")], [x], "tiny_cnn")


#: zoo name -> builder of (torch module, example input, static input shape(s))
ZOO: dict[str, Callable] = {
    "resnet50": _resnet50,
    "inception_v3": _inception_v3,
    "bert_base": _bert_base,
    "tiny_cnn": tiny_cnn,
}


def _torchvision(name: str):
    import torch
    import torchvision

    if name not in torchvision.models.list_models():
        raise GraphError(f"unknown torchvision model {name!r}; see torchvision.models.list_models()")
    torch.manual_seed(0)
    kw = {"aux_logits": False, "init_weights": False} if name in ("inception_v3", "googlenet") else {}
    m = torchvision.models.get_model(name, weights=None, **kw).eval()
    size = 299 if name == "inception_v3" else 224
    return m, torch.randn(1, 3, size, size), [1, 3, size, size]


def _builder(name: str) -> Optional[Callable]:
    """The builder of a zoo name or a ``tv:``/``hf:`` spec, or None."""
    if name in ZOO:
        return ZOO[name]
    prefix, _, rest = name.partition(":")
    if prefix == "tv" and rest:
        return lambda: _torchvision(rest)
    if prefix == "hf" and rest:
        from hsdag_core.hf_models import huggingface_model

        return lambda: huggingface_model(rest)
    return None


def _convert_zoo(name: str):
    import openvino as ov

    if name == "tiny_cnn":
        return tiny_cnn()
    target = cache_dir() / f"{name.replace(':', '_')}.xml"
    if target.exists():
        return ov.Core().read_model(str(target))
    module, example, shape = _builder(name)()
    import torch

    with torch.no_grad():
        try:
            model = ov.convert_model(module, example_input=example)
        except Exception as e:  # the converter raises many kinds, with pages of text
            raise GraphError(f"OpenVINO cannot convert {name}: {openvino_error_text(e)[:300].rstrip('.')}; export "
                             "the model yourself (torch.onnx.export, or optimum-cli export openvino) "
                             "and pass the .onnx or .xml file to --model") from None
    model.reshape(shape)
    model.set_friendly_name(name)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp.xml")
    ov.save_model(model, str(tmp), compress_to_fp16=False)
    tmp.with_suffix(".bin").replace(target.with_suffix(".bin"))
    tmp.replace(target)
    return ov.Core().read_model(str(target))


def openvino_error_text(exc: BaseException) -> str:
    """The informative line of an OpenVINO error (skips 'Exception from' / 'Check' lines)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith(("Exception from ", "Check '"))] or lines
    if not useful:
        return type(exc).__name__
    text = useful[0]
    if text.endswith(":") and len(useful) > 1:
        text = f"{text} {useful[1]}"
    return text


def _read_file_model(path: Path):
    """Read an IR or ONNX file with its own frontend only (no guessing across formats)."""
    from openvino.frontend import FrontEndManager

    fe = FrontEndManager().load_by_framework("ir" if path.suffix.lower() == ".xml" else "onnx")
    return fe.convert(fe.load(str(path)))


def _check_xml(path: Path) -> None:
    """Refuse an IR whose XML is malformed before OpenVINO's frontends guess at it."""
    import xml.etree.ElementTree as ET

    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        raise GraphError(f"{path} is not a valid OpenVINO IR: its XML is malformed ({e})") from None
    if root.tag != "net":
        raise GraphError(f"{path} is not an OpenVINO IR: its root element is <{root.tag}>, not <net>")


def check_model_spec(spec: str) -> None:
    """Refuse, without building anything, a model spec that :func:`load_model` could never
    load: an unknown name or a model file that does not exist (raises :class:`GraphError`)."""
    from hsdag_core.doppler import DOPPLER_PREFIX, is_doppler_spec
    from hsdag_core.generated import is_generated

    if is_generated(spec) or _builder(spec) is not None:
        return
    if is_doppler_spec(spec):
        if not Path(spec[len(DOPPLER_PREFIX):]).is_file():
            raise GraphError(f"{spec}: no such DOPPLER compute graph; give doppler:FILE.txt")
        return
    if spec.startswith("py:"):  # a user's module, read by the torch backend's graph source
        from hsdag_core.user_models import check_py_spec

        check_py_spec(spec)
        return
    path = Path(spec)
    if path.suffix.lower() not in (".xml", ".onnx"):
        raise GraphError(f"unknown model {spec!r}: give a {MODEL_HELP}")
    if not path.is_file():
        raise GraphError(f"model file {spec} does not exist")


def load_model(spec: str, input_shapes: Optional[Mapping[str, Sequence[int]] | Sequence[int]] = None):
    """Return a static-shape ``openvino.Model`` for a zoo name or a file path.

    Raises :class:`GraphError` with one sentence for a missing or unreadable
    file, an unknown name, or a model left with dynamic inputs.
    """
    from hsdag_core.generated import generated_model, is_generated

    if is_generated(spec):
        model = generated_model(spec)
    elif _builder(spec) is not None:
        model = _convert_zoo(spec)
    elif spec.startswith("py:"):
        raise GraphError(f"{spec} is your own PyTorch module, read by the torch backend's graph "
                         "source; add --backend torch (or export it to ONNX and pass the file)")
    else:
        check_model_spec(spec)
        path = Path(spec)
        if path.suffix.lower() == ".xml" and not path.with_suffix(".bin").is_file():
            raise GraphError(f"the weights file {path.with_suffix('.bin')} of IR {spec} is missing")
        if path.stat().st_size == 0:
            raise GraphError(f"model file {spec} is empty; give an OpenVINO IR (.xml + .bin) or "
                             "ONNX file that holds a model")
        if path.suffix.lower() == ".xml":
            _check_xml(path)
        try:
            model = _read_file_model(path)
        except Exception as e:  # OpenVINO raises RuntimeError subclasses with long texts
            raise GraphError(f"OpenVINO cannot read {spec}: {openvino_error_text(e)}") from None
        if not model.get_ops() or not model.outputs:
            raise GraphError(f"model file {spec} holds no ops or no outputs; give an OpenVINO IR "
                             "(.xml + .bin) or ONNX file that holds a model")
        model.set_friendly_name(path.stem)
    if input_shapes is not None:
        model.reshape(input_shapes)
    dynamic = [i.get_any_name() for i in model.inputs if i.get_partial_shape().is_dynamic]
    if dynamic:
        raise GraphError(f"input {dynamic[0]!r} of {spec} has a dynamic shape; "
                         "pass static shapes with --input-shape")
    return model
