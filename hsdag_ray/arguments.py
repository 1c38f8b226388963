"""The command line of a training run: a flag of every :class:`TrainConfig` field.

:func:`build_parser` makes a flag of every field (with the field's docstring as
its help) and :func:`config_from_args` fills a :class:`TrainConfig` from
``--config run.yaml``, a resumed run's ``config.json`` and the flags, flags winning.
"""
from __future__ import annotations

import argparse
import json
import re
from dataclasses import fields
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Optional, Sequence

from hsdag_ray.cli import UsageError
from hsdag_ray.config import SECTIONS, TrainConfig

__all__ = ["Command", "build_parser", "config_from_args"]


def _first_sentence(text: str) -> str:
    """``text`` up to the end of its first sentence (the short ``--help`` shows that)."""
    return re.split(r"(?<!\.)\.\s+(?=[A-Z])|;\s", text, maxsplit=1)[0].rstrip(".")


def shown_sections(method: Optional[str]) -> tuple[str, ...]:
    """The sections of :data:`hsdag_ray.config.SECTIONS` that ``--help`` shows: the run's,
    and with a method named (``--method M --help``) the learning, guide and method's own."""
    if method is None:
        return ("run",)
    return ("run", "run details", "learning", "guide") + ((method,) if method in SECTIONS else ())


def build_parser(help_for: Optional[Mapping[str, str]] = None,
                 description: Optional[str] = None,
                 sections: Optional[Sequence[str]] = None,
                 method: Optional[str] = None) -> argparse.ArgumentParser:
    """The command line of every TrainConfig field; ``help_for`` replaces the help of
    fields whose meaning another command changes (e.g. pretrain's ``budget``);
    ``description`` heads ``--help``; ``sections`` (of :data:`SECTIONS`): the settings
    ``--help`` lists in full, grouped by section (None: every section; the others are
    parsed all the same); ``method``: the method whose description and departures from its
    paper ``--help`` ends with."""
    help_for = dict(help_for or {})
    short = sections is not None and tuple(sections) == ("run",)
    if short and description:  # its first paragraph and its examples
        paragraphs = description.split("\n\n")
        description = "\n\n".join([paragraphs[0]] + [p for p in paragraphs[1:] if "python -m" in p][:2])
    ap = argparse.ArgumentParser(
        prog="python -m hsdag_ray.train", description=description,
        formatter_class=lambda prog: argparse.RawDescriptionHelpFormatter(prog, max_help_position=30))
    ap.add_argument("--config", help="YAML file with any of the settings below (flags win)")
    ap.add_argument("--resume", metavar="RUN_DIR", help="continue the run in this folder")
    ap.add_argument("--verbose", action="store_true",
                    help="show the libraries' warnings and logs (torch, Ray, RLlib, W&B, "
                         "OpenVINO) on the console instead of the run's libraries.log")
    if method is not None:
        ap.epilog = _method_epilog(method)
    if short:
        ap.epilog = ("A learned method's settings (its network, REINFORCE or PPO, the guide's "
                     "details): python -m hsdag_ray.train --method METHOD --help. Methods: "
                     + ", ".join(_method_names()) + ".")
    groups = {name: ap.add_argument_group(f"{name} settings") for name in (sections or SECTIONS)}
    section_of = {n: sec for sec, names in SECTIONS.items() for n in names}
    defaults = TrainConfig()
    doc = _field_docs()
    for f in fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name)
        help_text = doc.get(f.name, "")
        group = groups.get(section_of.get(f.name, "run"))
        if group is None:  # parsed, not listed
            ap_or_group, help_text = ap, argparse.SUPPRESS
        else:
            ap_or_group = group
            if short:
                help_text = _first_sentence(help_text)
        if help_text == argparse.SUPPRESS:
            if isinstance(default, bool) and f.name.startswith("no_"):
                ap.add_argument(flag, dest=f.name, action="store_const", const=True, default=None,
                                help=help_text)
                ap.add_argument("--" + f.name[3:].replace("_", "-"), dest=f.name,
                                action="store_const", const=False, help=help_text)
            elif isinstance(default, bool):
                ap.add_argument(flag, action=argparse.BooleanOptionalAction, default=None,
                                help=help_text)
            else:
                ap.add_argument(flag, type=None if isinstance(default, list) else type(default),
                                default=None, help=help_text)
            help_for.pop(f.name, None)
            continue
        metavar = {int: "N", float: "X", list: "A,B"}.get(type(default), f.name.split("_")[-1].upper())
        if f.name in help_for:
            ap_or_group.add_argument(flag, type=type(default), default=None, help=help_for.pop(f.name))
        elif isinstance(default, bool) and f.name.startswith("no_"):
            # argparse's BooleanOptionalAction reads any flag starting with --no- as False,
            # so --no-cost would switch cost features on: the pair is spelled out instead
            on = "--" + f.name[3:].replace("_", "-")
            ap_or_group.add_argument(flag, dest=f.name, action="store_const", const=True, default=None,
                            help=f"{help_text} ({on} undoes it)")
            ap_or_group.add_argument(on, dest=f.name, action="store_const", const=False,
                            help=argparse.SUPPRESS)
        elif isinstance(default, bool):
            ap_or_group.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif isinstance(default, list):
            ap_or_group.add_argument(flag, default=None, metavar=metavar,
                                     help=help_text + " (comma-separated)")
        else:
            ap_or_group.add_argument(flag, type=type(default), default=None, metavar=metavar,
                                     help=f"{help_text} (default: {default if default != '' else 'none'})")
    if help_for:
        raise ValueError(f"no setting named {', '.join(help_for)}")
    return ap


def _field_docs() -> dict[str, str]:
    doc = TrainConfig.__doc__ or ""
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
        head, _, rest = s.partition(":")
        names = [h.strip() for h in head.split("/")]
        if indent <= item_indent and rest and all(n.isidentifier() for n in names):
            for n in current:
                out[n] = " ".join(text)
            current, text = names, [rest.strip()]
        else:
            text.append(s)
    for n in current:
        out[n] = " ".join(text)
    return out


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


def config_from_args(argv: Optional[Sequence[str]], description: Optional[str] = None) -> Command:
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    named = _named_method(argv)
    sections = shown_sections(named) if ("-h" in argv or "--help" in argv) else None
    args = build_parser(description=description, sections=sections,
                        method=named if sections else None).parse_args(argv)
    values: dict[str, Any] = {}
    resume = Path(args.resume) if args.resume else None
    if resume is not None:
        cfg_file = resume / "config.json"
        if not cfg_file.is_file():
            raise UsageError(f"{resume} is not a run folder (no config.json); pass the folder "
                             "a previous run printed")
        values.update(json.loads(cfg_file.read_text())["train"])
    if args.config:
        values.update(TrainConfig.yaml_settings(args.config))
    for f in fields(TrainConfig):
        v = getattr(args, f.name)
        if v is not None:
            values[f.name] = v
    if isinstance(values.get("devices"), str):
        values["devices"] = [d for d in values["devices"].split(",") if d]
    try:
        cfg = TrainConfig(**values)
    except TypeError as e:
        raise UsageError(f"bad settings: {e}") from None
    cfg.validate()
    return Command(cfg, resume, bool(args.verbose))
