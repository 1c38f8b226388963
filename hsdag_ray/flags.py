"""Flags made from the fields of a settings class, the same for every command.

A settings class is a dataclass; each field is a setting unless it carries
``metadata={"setting": False}`` (a value the run sets itself). A field's flag, its type,
its choices and its help come from the field: its type hint (``int``, ``float``, ``str``,
``bool`` as an on/off pair, ``tuple[str, ...]`` as a comma-separated list, a
``typing.Literal`` as choices, or ``metadata={"choices": f}`` for choices a registry holds)
and the string right under it (or its line of the class's ``Attributes:``).
:func:`add_section_args` adds a class's flags to a parser, :func:`section_from_args`
reads them back, and :func:`~hsdag_core.typed_settings.choice_error` checks a value the
parser did not see (a YAML file's, a run folder's). The commands that measure take the timing flags
(:func:`add_timing_args`), the same as ``train``'s ``timing`` section.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import re
import textwrap
import typing
from functools import lru_cache
from typing import Any, Literal, Sequence, Union

from envs.base import TimingConfig
from hsdag_core.typed_settings import choice_error, choices_of, settings_of, type_hints
from hsdag_ray.cli import UsageError

__all__ = ["Parser", "settings_of", "field_docs", "choices_of", "choice_error", "add_field",
           "add_section_args", "section_from_args", "first_sentence", "retire_flag",
           "add_timing_args", "timing_from_args"]


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one-sentence :class:`UsageError` (exit 2)."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{message} (see --help)")


def first_sentence(text: str) -> str:
    """``text`` up to the end of its first sentence (the short ``--help`` shows that)."""
    return re.split(r"(?<!\.)\.\s+(?=[A-Z])|;\s", text, maxsplit=1)[0].rstrip(".")


@lru_cache(maxsize=None)
def field_docs(cls: type) -> dict[str, str]:
    """A settings class's help per field: the string literal right under a field (in the
    class or a base class), else the field's entry in a docstring's ``Attributes:`` block."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__[:-1]):
        out.update(_attributes_block(klass.__doc__ or "") if "Attributes:" in (klass.__doc__ or "") else {})
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                out[node.target.id] = " ".join(after.value.value.split())
    return out


def _attributes_block(doc: str) -> dict[str, str]:
    """The entries of a Google-style ``Attributes:`` block (``name: text``, continuation
    lines indented deeper; ``a / b: text`` documents both)."""
    if "Attributes:" not in doc:
        return {}
    out: dict[str, str] = {}
    current: list[str] = []
    text: list[str] = []
    item_indent = None  # an attribute starts at this indentation; deeper lines continue one
    for line in doc.split("Attributes:")[-1].splitlines():
        s = line.strip()
        if not s:
            continue
        indent = len(line) - len(line.lstrip())
        item_indent = indent if item_indent is None else item_indent
        if indent < item_indent:  # the block has ended
            break
        head, _, rest = s.partition(":")
        names = [h.strip().strip("`") for h in head.split("/")]
        if indent <= item_indent and rest and all(n.isidentifier() for n in names):
            for n in current:
                out[n] = " ".join(text)
            current, text = names, [rest.strip()]
        else:
            text.append(s)
    for n in current:
        out[n] = " ".join(text)
    return out


def _value_type(cls: type, name: str) -> type:
    """What a setting's flag parses its value as: the type hint, a ``Literal``'s values'
    type, a union's first plain type (``Optional[str]``: str), or ``tuple`` for a list."""
    hint = type_hints(cls)[name]
    origin = typing.get_origin(hint)
    if origin is Literal:
        return type(typing.get_args(hint)[0])
    if origin is Union:
        return next(a for a in typing.get_args(hint) if a in (bool, int, float, str))
    if origin in (tuple, list):
        return tuple
    return hint


def add_field(group, cls: type, name: str, flag: str, dest: str, default: Any, text: str) -> None:
    """One setting's flag: an on/off pair for a switch, a comma-separated list, a typed
    value (choices from its type), its default shown in the help."""
    value_type = _value_type(cls, name)
    if value_type is bool:
        group.add_argument(flag, dest=dest, action=argparse.BooleanOptionalAction,
                           default=None, help=text)
        return
    if text != argparse.SUPPRESS and value_type is not tuple and "(default" not in text:
        shown = default if default not in ("", None) else "none"
        text = f"{text.rstrip('.')} (default: {shown})"
    if value_type is tuple:
        group.add_argument(flag, dest=dest, default=None, metavar="A,B",
                           help=text if text == argparse.SUPPRESS else text + " (comma-separated)")
        return
    metavar = {int: "N", float: "X"}.get(value_type, name.split("_")[-1].upper())
    group.add_argument(flag, dest=dest, type=value_type, default=None, metavar=metavar, help=text,
                       choices=choices_of(cls, name))


def add_section_args(ap: argparse.ArgumentParser, cls: type, section: str, title: str,
                     default: Any = None, skip: Sequence[str] = ()) -> None:
    """A flag ``--name`` for every setting of ``cls`` but ``skip``, in a group headed
    ``title``; each value lands in ``args.<section>.<name>`` (None when not given)."""
    default = default if default is not None else cls()
    group = ap.add_argument_group(title)
    docs = field_docs(cls)
    for name in settings_of(cls):
        if name not in skip:
            add_field(group, cls, name, "--" + name.replace("_", "-"), f"{section}.{name}",
                      getattr(default, name), docs.get(name, ""))


def section_from_args(args: argparse.Namespace, cls: type, section: str, default: Any = None,
                      **fixed: Any) -> Any:
    """``default`` (or ``cls()``) with the flags :func:`add_section_args` added that were
    given, and ``fixed``; a value the class refuses is a :class:`UsageError`."""
    given = {name: value for key, value in vars(args).items()
             for s, _, name in [key.partition(".")] if s == section and value is not None}
    try:
        return dataclasses.replace(default if default is not None else cls(), **given, **fixed)
    except (TypeError, ValueError) as e:
        raise UsageError(f"bad {section} setting: {e}") from None


class _Retired(argparse.Action):
    """A flag that was renamed: using it says which flag replaced it."""

    def __call__(self, parser, namespace, values, option_string=None):
        raise UsageError(f"{option_string} was renamed; use {self.default} instead")


def retire_flag(ap: argparse.ArgumentParser, old: str, new: str) -> None:
    """Make ``old`` (a flag a setting was renamed from) a one-sentence error naming ``new``."""
    ap.add_argument(old, nargs="?", action=_Retired, default=new, dest=f"retired.{old}",
                    help=argparse.SUPPRESS)


def add_timing_args(ap: argparse.ArgumentParser, skip: Sequence[str] = ("validate_outputs",)) -> None:
    """A flag of every field of :class:`envs.base.TimingConfig` but ``skip`` (the same flags
    as ``train``'s timing section), and the old ``--timeout`` and ``--precision-cap`` as
    errors naming their flags."""
    add_section_args(ap, TimingConfig, "timing", "timing (real backends)", skip=skip)
    for old, new in (("--timeout", "--timeout-s"), ("--precision-cap", "--precision-cap-s")):
        retire_flag(ap, old, new)


def timing_from_args(args: argparse.Namespace, validate: bool = False) -> TimingConfig:
    """The :class:`TimingConfig` of the flags :func:`add_timing_args` added (checked by the
    class), comparing outputs when ``validate``."""
    return section_from_args(args, TimingConfig, "timing", validate_outputs=validate)
