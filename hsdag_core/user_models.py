"""A user's own PyTorch module as a model: ``py:package.module:factory``.

``factory()`` returns an ``nn.Module`` (its float input's shape then comes from
``--input-shape``) or ``(module, example_inputs)``. The torch backend's graph source
(:mod:`hsdag_core.torch_graph`) exports it; :func:`hsdag_core.models.check_model_spec`
checks the spec before a run starts.
"""
from __future__ import annotations

import importlib

from hsdag_core.errors import GraphError

__all__ = ["PY_PREFIX", "check_py_spec", "user_factory"]

#: prefix of a user's own module: ``py:package.module:factory``
PY_PREFIX = "py:"


def check_py_spec(spec: str):
    """The factory ``py:package.module:factory`` names, imported but not called; a
    :class:`GraphError` saying what is wrong (unreadable, not importable, no such name)."""
    target = spec[len(PY_PREFIX):]
    mod_name, _, attr = target.partition(":")
    if not mod_name or not attr:
        raise GraphError(f"cannot read {spec!r}; write py:package.module:factory, a function "
                         "that returns an nn.Module or (module, example_inputs)")
    try:
        return getattr(importlib.import_module(mod_name), attr)
    except ImportError as e:
        raise GraphError(f"{spec}: cannot import {mod_name} ({e}); is it on PYTHONPATH?") from None
    except AttributeError:
        raise GraphError(f"{spec}: module {mod_name} has no {attr!r}") from None


def user_factory(spec: str):
    """The module and example inputs of ``py:package.module:factory``."""
    factory = check_py_spec(spec)
    try:
        made = factory()
    except Exception as e:  # the user's code: say where it failed, in one line
        raise GraphError(f"{spec}: the factory raised {type(e).__name__}: {e}") from None
    return made if isinstance(made, tuple) else (made, None)
