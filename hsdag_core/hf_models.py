"""Hugging Face architectures with random weights: the ``hf:`` model specs.

``hf:TYPE[:KEY=VALUE...]``
    the base model (no task head) of a Hugging Face model type built from its
    default config, random weights, batch 1: ``hf:gpt2``, ``hf:t5``,
    ``hf:vit``, ``hf:swin``. ``KEY=VALUE`` pairs set fields of the config
    first (``hf:llama:num_hidden_layers=2:hidden_size=512``), and ``seq=N``
    the sequence length of a text model (default 128).

A text model reads ``input_ids`` and ``attention_mask`` (and an
encoder-decoder its ``decoder_input_ids``, of ``seq`` tokens too); a vision
model (its main input is ``pixel_values``) one image of its config's size; a
text-image model (``hf:clip``, ``hf:siglip``) both; a speech encoder one
second of 16 kHz waveform (``input_values``, ``hf:wav2vec2``). A model
reading another input (Whisper's log-mel frames) is refused with the advice
to export it to ONNX. A model whose default config would not fit this
machine's memory in f32 is refused before it is built, with a sentence
saying how to make it smaller.
"""
from __future__ import annotations

import os
from typing import Any

from hsdag_core.errors import GraphError

__all__ = ["huggingface_model", "parse_hf_spec"]

SEQ_LEN = 128
#: samples of waveform a speech model reads (one second at 16 kHz)
SAMPLE_RATE = 16000
#: the share of the machine's memory the f32 weights may take (conversion holds about three copies)
MEMORY_SHARE = 0.25


def _value(text: str) -> Any:
    """A config value from the spec: int, float, true/false, else the text."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_hf_spec(rest: str) -> tuple[str, dict[str, Any], int]:
    """``TYPE[:KEY=VALUE...]`` (the spec after ``hf:``) -> model type, config fields, sequence length."""
    model_type, *pairs = rest.split(":")
    fields: dict[str, Any] = {}
    seq_len = SEQ_LEN
    for pair in pairs:
        key, eq, text = pair.partition("=")
        if not (key and eq and text):
            raise GraphError(f"hf:{rest}: {pair!r} is not KEY=VALUE (e.g. hf:llama:num_hidden_layers=2)")
        if key == "seq":
            seq_len = _value(text)
            if not isinstance(seq_len, int) or seq_len < 1:
                raise GraphError(f"hf:{rest}: seq must be a positive integer, got {text!r}")
        else:
            fields[key] = _value(text)
    return model_type, fields, seq_len


def _config(model_type: str, fields: dict[str, Any]):
    from transformers import AutoConfig

    try:
        config = AutoConfig.for_model(model_type)
    except ValueError:
        raise GraphError(f"unknown Hugging Face model type {model_type!r} (e.g. gpt2, bert, t5, "
                         "distilbert, roberta, vit)") from None
    for key, value in fields.items():
        if not hasattr(config, key):
            raise GraphError(f"the {model_type} config has no field {key!r}; see its "
                             f"{type(config).__name__} in the transformers documentation")
        setattr(config, key, value)
    if hasattr(config, "use_cache"):
        config.use_cache = False  # no key/value cache objects in the traced outputs
    return config


def _machine_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _base_model(spec: str, config):
    """The base model of ``config`` with random weights: ``AutoModel.from_config``, or the
    class its mapping names where that fails on a config without ``architectures`` (Funnel
    in transformers 4.x); a model transformers cannot build is refused in a sentence."""
    from transformers import MODEL_MAPPING, AutoModel

    try:
        return AutoModel.from_config(config)
    except Exception as first:  # noqa: BLE001 - retried, then reported
        try:
            cls = MODEL_MAPPING[type(config)]
            cls = cls[0] if isinstance(cls, (list, tuple)) else cls
            return cls(config)
        except Exception:  # noqa: BLE001 - the first error is the one to report
            raise GraphError(
                f"transformers cannot build {spec} from its default config "
                f"({type(first).__name__}: {str(first).splitlines()[0][:200]}); set fields of its "
                f"config in the spec (KEY=VALUE) or export the model to ONNX and pass the file"
            ) from None


def _check_size(spec: str, model_type: str, config) -> None:
    """Refuse a model whose f32 weights would take over MEMORY_SHARE of the machine's memory
    (counted on torch's meta device: nothing is allocated)."""
    import torch

    with torch.device("meta"):
        params = sum(p.numel() for p in _base_model(spec, config).parameters())
    need, have = 4 * params, _machine_memory()
    if need > MEMORY_SHARE * have:
        layers = "num_hidden_layers" if hasattr(config, "num_hidden_layers") else "KEY"
        raise GraphError(
            f"{spec} has {params / 1e9:.1f} billion parameters ({need / 2**30:.0f} GiB in f32), too "
            f"many to convert in this machine's {have / 2**30:.0f} GiB; make it smaller in the spec, "
            f"e.g. hf:{model_type}:{layers}=2 (any field of its config, KEY=VALUE)")


def huggingface_model(rest: str):
    """(torch module, example input, static input shapes) of ``hf:`` + ``rest``."""
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # its notes on config defaults are not the user's to act on
    model_type, fields, seq_len = parse_hf_spec(rest)
    config = _config(model_type, fields)
    _check_size(f"hf:{rest}", model_type, config)
    torch.manual_seed(0)
    m = _base_model(f"hf:{rest}", config).eval()
    main_input = getattr(m, "main_input_name", "input_ids")
    seq_len = _fit_positions(f"hf:{rest}", config, seq_len, explicit=any(pair.startswith("seq=") for pair in rest.split(":")[1:]))
    example: dict[str, Any] = {}
    if main_input == "pixel_values" or main_input == "input_ids" and _reads(m, "pixel_values"):
        # a vision model, or a text-image one (CLIP, SigLIP: both towers)
        vision = getattr(config, "vision_config", None) or config
        size = getattr(vision, "image_size", None) or 224
        h, w = (size, size) if isinstance(size, int) else tuple(size)
        channels = int(getattr(vision, "num_channels", 3) or 3)
        example["pixel_values"] = torch.randn(1, channels, int(h), int(w))
        if main_input == "input_ids":  # its nested outputs do not trace (SigLIP): flatten them
            m = _text_image(m)
    if main_input == "input_values":  # a speech model reading the waveform (wav2vec 2.0, HuBERT)
        example["input_values"] = torch.randn(1, SAMPLE_RATE)
    elif main_input == "input_ids":
        ids = torch.ones(1, seq_len, dtype=torch.long)
        example.update(input_ids=ids, attention_mask=ids)
    elif main_input != "pixel_values":
        raise GraphError(f"hf:{model_type} reads {main_input!r}; hf: builds text, vision and speech "
                         "models (input_ids, pixel_values, input_values): export this one to ONNX "
                         "and pass the file")
    if getattr(config, "is_encoder_decoder", False):  # T5, BART: the decoder reads its own ids
        example["decoder_input_ids"] = torch.ones(1, seq_len, dtype=torch.long)
    return m, example, {k: list(v.shape) for k, v in example.items()}


def _tensors(out) -> list:
    """The tensors of a model's output, nested output objects and tuples flattened."""
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    return [t for x in out for t in _tensors(x)] if isinstance(out, (tuple, list)) else []


def _text_image(model):
    """A text-image model (CLIP, SigLIP) returning its outputs' tensors as one flat tuple:
    the tracer takes tuples of tensors, not output objects holding output objects."""
    import torch

    class TextImage(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, pixel_values):
            return tuple(_tensors(self.model(input_ids=input_ids, attention_mask=attention_mask,
                                             pixel_values=pixel_values)))

    return TextImage().eval()


def _fit_positions(spec: str, config, seq_len: int, explicit: bool) -> int:
    """The sequence length within the model's positions (CLIP's text tower has 77): the
    default is cut to fit, a ``seq=N`` beyond them is refused."""
    text = getattr(config, "text_config", None) or config
    limit = getattr(text, "max_position_embeddings", None)
    if not isinstance(limit, int) or limit < 1 or seq_len <= limit:  # XLNet: -1, no limit
        return seq_len
    if explicit:
        raise GraphError(f"{spec}: seq={seq_len} is longer than the model's {limit} positions; "
                         f"use seq={limit} or less")
    return limit


def _reads(model, name: str) -> bool:
    """Whether the model's forward takes ``name``."""
    import inspect

    return name in inspect.signature(model.forward).parameters
