"""The command line of a training run: a flag of every setting of every section.

:func:`build_parser` makes a flag of every field of every section of
:class:`TrainConfig` (``--name``, or ``--section.name`` for a name several sections
share), with the field's own help: the string under it, or its line of the class's
``Attributes:``. :func:`config_from_args` fills a :class:`TrainConfig` from ``--config
run.yaml``, a resumed run's ``config.json`` and the flags, flags winning; the flags of
earlier releases (:data:`hsdag_ray.config.RENAMED`) still parse.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import json
import re
import textwrap
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Optional, Sequence

from hsdag_ray.cli import UsageError
from hsdag_ray.config import RENAMED, SECTIONS, TrainConfig, setting_index, settings_of

__all__ = ["Command", "build_parser", "config_from_args", "field_docs", "flag_of"]

#: the sections ``--help`` lists without a method named (the others with ``--method M``)
SHORT_SECTIONS = ("run", "env")
#: the settings of those that ``--help`` lists without a method named
SHORT_SETTINGS = ("model", "method", "guide", "budget", "seed", "init", "wandb", "out", "name",
                  "address", "env_runners", "backend", "devices", "profile", "objective")
#: the sections of one method's own network
METHOD_SECTIONS = ("hsdag", "placeto", "rnn", "gdp")
#: the value types of earlier releases' flags that take a value (the others are switches)
OLD_VALUE_TYPES = {"gcn_layers": int, "start_logit": float, "timeout": float, "hidden_dim": int,
                   "rnn_groups": int}


def _first_sentence(text: str) -> str:
    """``text`` up to the end of its first sentence (the short ``--help`` shows that)."""
    return re.split(r"(?<!\.)\.\s+(?=[A-Z])|;\s", text, maxsplit=1)[0].rstrip(".")


@lru_cache(maxsize=None)
def field_docs(cls: type) -> dict[str, str]:
    """A settings class's help per field: the string literal right under a field, else the
    field's entry in the class docstring's ``Attributes:`` block (a base class's fields:
    the base's)."""
    out: dict[str, str] = {}
    for base in cls.__mro__[-2:0:-1]:
        if dataclasses.is_dataclass(base):
            out.update(field_docs(base))
    out.update(_attributes_block(cls.__doc__ or ""))
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return out
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


def flag_of(section: str, name: str) -> str:
    """A setting's flag: ``--name``, or ``--section.name`` when several sections have it."""
    shared = len(setting_index().get(name, ())) > 1
    return "--" + (f"{section}." if shared else "") + name.replace("_", "-")


def shown_sections(method: Optional[str]) -> tuple[str, ...]:
    """The sections ``--help`` lists: the run's and the environment's, and with a method
    named (``--method M --help``) the general ones and the method's own."""
    if method is None:
        return SHORT_SECTIONS
    return tuple(s for s in SECTIONS if s not in METHOD_SECTIONS or s == method)


def build_parser(help_for: Optional[Mapping[str, str]] = None,
                 description: Optional[str] = None,
                 sections: Optional[Sequence[str]] = None,
                 method: Optional[str] = None) -> argparse.ArgumentParser:
    """The command line of every setting; ``help_for`` replaces the help of settings whose
    meaning another command changes (e.g. pretrain's ``budget``); ``description`` heads
    ``--help``; ``sections`` (of :data:`SECTIONS`): the sections ``--help`` lists in full
    (None: every one; the others are parsed all the same); ``method``: the method whose
    description and departures from its paper ``--help`` ends with. Every flag's value
    lands in ``args.<section>.<name>`` (None when not given)."""
    help_for = dict(help_for or {})
    short = sections is not None and tuple(sections) == SHORT_SECTIONS
    if short and description:  # its first paragraph and its examples
        paragraphs = description.split("\n\n")
        description = "\n\n".join([paragraphs[0]] + [p for p in paragraphs[1:] if "python -m" in p][:2])
    ap = argparse.ArgumentParser(
        prog="python -m hsdag_ray.train", description=description,
        usage="python -m hsdag_ray.train [--config FILE] [--resume RUN_DIR] [--SETTING VALUE ...]",
        formatter_class=lambda prog: argparse.RawDescriptionHelpFormatter(prog, max_help_position=30))
    ap.add_argument("--config", help="YAML file with any of the settings below, nested by "
                                     "section or flat (flags win)")
    ap.add_argument("--resume", metavar="RUN_DIR", help="continue the run in this folder")
    ap.add_argument("--verbose", action="store_true",
                    help="show the libraries' warnings and logs (torch, Ray, RLlib, W&B, "
                         "OpenVINO) on the console instead of the run's libraries.log")
    if method is not None:
        ap.epilog = _method_epilog(method)
    if short:
        ap.epilog = ("Every other setting (timing, features, learning, the search aids, a "
                     "method's network): python -m hsdag_ray.train --method METHOD --help. "
                     "Methods: " + ", ".join(_method_names()) + ".")
    defaults = TrainConfig()
    for section, cls in SECTIONS.items():
        shown = sections is None or section in sections
        group = ap.add_argument_group(f"{section} settings", _first_line(cls)) if shown else ap
        docs = field_docs(cls)
        for name in settings_of(cls):
            default = getattr(getattr(defaults, section), name)
            text = help_for.pop(name, None) or docs.get(name, "")
            if not shown or (short and name not in SHORT_SETTINGS):
                text = argparse.SUPPRESS
            elif short:
                text = _first_sentence(text)
            _add(group, flag_of(section, name), f"{section}.{name}", default, text)
    taken = {s for a in ap._actions for s in a.option_strings}
    for old in RENAMED:  # earlier releases' flags: parsed, not listed
        flag = "--" + old.replace("_", "-")
        if flag in taken:  # --no-fractal: the switch's own off flag
            continue
        if old in OLD_VALUE_TYPES:
            ap.add_argument(flag, dest=f"old.{old}", type=OLD_VALUE_TYPES[old], default=None,
                            help=argparse.SUPPRESS)
        else:
            ap.add_argument(flag, dest=f"old.{old}", action="store_const", const=True,
                            default=None, help=argparse.SUPPRESS)
    if help_for:
        raise ValueError(f"no setting named {', '.join(help_for)}")
    return ap


def _first_line(cls: type) -> str:
    return (cls.__doc__ or "").strip().split("\n\n")[0].replace("\n    ", " ")


def _add(group, flag: str, dest: str, default: Any, text: str) -> None:
    """One setting's flag: on/off pairs for switches, comma-separated lists, typed values."""
    if isinstance(default, bool):
        group.add_argument(flag, dest=dest, action=argparse.BooleanOptionalAction,
                           default=None, help=text)
        return
    if text != argparse.SUPPRESS and not isinstance(default, (list, tuple)) and "(default" not in text:
        shown = default if default != "" else "none"
        text = f"{text.rstrip('.')} (default: {shown})"
    if isinstance(default, (list, tuple)):
        group.add_argument(flag, dest=dest, default=None, metavar="A,B",
                           help=text if text == argparse.SUPPRESS else text + " (comma-separated)")
        return
    metavar = {int: "N", float: "X"}.get(type(default), dest.rsplit(".", 1)[-1].split("_")[-1].upper())
    group.add_argument(flag, dest=dest, type=type(default), default=None, metavar=metavar, help=text)


class Command(NamedTuple):
    """What ``python -m hsdag_ray.train`` was asked: the run's settings, the
    run folder to continue (or None) and whether to show the libraries' logs."""

    cfg: TrainConfig
    resume: Optional[Path]
    verbose: bool


def _method_names() -> list[str]:
    from policies.registry import METHODS

    return list(METHODS)


def _method_epilog(method: Optional[str]) -> Optional[str]:
    """What ``--method M --help`` ends with: the method's one line and where it departs
    from its paper (:attr:`policies.registry.Method.departures`)."""
    from policies.registry import METHODS

    m = METHODS.get(method or "")
    if m is None:
        return None
    lines = [f"{m.name}: {m.description}."]
    if m.departures:
        lines.append("Departures from the paper (each fixes a defect of the published method "
                     "or its reference code):")
        lines += [f"  - {d}" for d in m.departures]
    elif m.kind == "rl":
        lines.append("It runs as its paper specifies.")
    return "\n".join(lines)


def _named_method(argv: Sequence[str]) -> Optional[str]:
    """The ``--method`` an argument list names, if any (for what ``--help`` lists)."""
    for k, a in enumerate(argv):
        if a == "--method" and k + 1 < len(argv):
            return argv[k + 1]
        if a.startswith("--method="):
            return a.split("=", 1)[1]
    return None


def given_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the flags gave (``section.name`` -> value), an earlier release's flags
    (:data:`hsdag_ray.config.RENAMED`) first, so a flag of the new form wins over one."""
    old: dict[str, Any] = {}
    new: dict[str, Any] = {}
    for key, value in vars(args).items():
        section, _, name = key.partition(".")
        if value is None or not name:
            continue
        if section == "old":
            old[name] = value
        elif section in SECTIONS:
            new[key] = value
    return {**old, **new}


def config_from_args(argv: Optional[Sequence[str]], description: Optional[str] = None) -> Command:
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    named = _named_method(argv)
    sections = shown_sections(named) if ("-h" in argv or "--help" in argv) else None
    args = build_parser(description=description, sections=sections,
                        method=named if sections else None).parse_args(argv)
    cfg = TrainConfig()
    resume = Path(args.resume) if args.resume else None
    if resume is not None:
        cfg_file = resume / "config.json"
        if not cfg_file.is_file():
            raise UsageError(f"{resume} is not a run folder (no config.json); pass the folder "
                             "a previous run printed")
        cfg = cfg.with_settings(json.loads(cfg_file.read_text())["train"], source=str(cfg_file))
    if args.config:
        cfg = cfg.with_settings(_yaml(args.config), source=args.config)
    cfg = cfg.with_settings(given_settings(args), source="the command line")
    cfg.validate()
    return Command(cfg, resume, bool(args.verbose))


def _yaml(path: str) -> dict[str, Any]:
    from hsdag_ray.cli import read_yaml_mapping

    return read_yaml_mapping(path, "config file")
