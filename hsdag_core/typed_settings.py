"""What a settings class allows, read from its fields: the settings, each one's choices,
and the first value outside them.

A settings class is a dataclass; each field is a setting unless it carries
``metadata={"setting": False}`` (a value the run sets itself). A setting's choices are
its ``metadata["choices"]`` (a tuple, or a function returning one, for choices a registry
holds), else the values of its ``typing.Literal`` type. The commands' flags
(:mod:`hsdag_ray.flags`) give the parser these choices; :func:`choice_error` checks a
value the parser did not see (a YAML file's, a run folder's, an environment's mapping).
"""
from __future__ import annotations

import dataclasses
import typing
from functools import lru_cache
from typing import Any, Literal, Optional

__all__ = ["settings_of", "choices_of", "choice_error", "type_hints", "field_of"]


def settings_of(cls: type) -> tuple[str, ...]:
    """The settings of a settings class: its fields, less those the run sets itself
    (``metadata={"setting": False}``)."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("setting", True))


@lru_cache(maxsize=None)
def type_hints(cls: type) -> dict[str, Any]:
    """``cls``'s resolved type hints (cached)."""
    return typing.get_type_hints(cls)


def field_of(cls: type, name: str) -> dataclasses.Field:
    """The dataclass field ``name`` of ``cls``."""
    return next(f for f in dataclasses.fields(cls) if f.name == name)


def choices_of(cls: type, name: str) -> Optional[tuple]:
    """The values a setting may take: its ``metadata["choices"]`` (a tuple, or a function
    returning one), else its ``Literal`` type's values; None when any value of its type."""
    given = field_of(cls, name).metadata.get("choices")
    if given is not None:
        return tuple(given() if callable(given) else given)
    hint = type_hints(cls)[name]
    return typing.get_args(hint) if typing.get_origin(hint) is Literal else None


def choice_error(cls: type, obj: Any) -> str:
    """The first setting of ``obj`` (an instance of ``cls``) whose value is not among its
    choices, in one sentence ("" when every one is)."""
    for name in settings_of(cls):
        allowed = choices_of(cls, name)
        value = getattr(obj, name)
        if allowed is not None and value not in allowed:
            shown = ", ".join(repr(c) if c == "" else str(c) for c in allowed)
            return f"unknown {name} {value!r}; choose one of {shown}"
    return ""
