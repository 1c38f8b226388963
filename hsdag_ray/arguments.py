"""The command line of a training run: a flag of every setting of every section.

:func:`build_parser` makes a flag of every field of every section of
:class:`TrainConfig` (``--name``, or ``--section.name`` for a name several sections
share), typed, with choices and help from the field (:mod:`hsdag_ray.flags`).
:func:`config_from_args` fills a :class:`TrainConfig` from ``--config run.yaml``, a
resumed run's ``config.json`` and the flags, flags winning; a renamed setting's old flag
(:data:`hsdag_ray.run.config.RETIRED`) is a one-sentence error naming its new one.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Optional, Sequence

from hsdag_ray.cli import UsageError
from hsdag_ray.run.config import RETIRED, SECTIONS, TrainConfig, flag_of, setting_index, settings_of
from hsdag_ray.flags import Parser, add_field, field_docs, first_sentence, retire_flag

__all__ = ["Command", "build_parser", "config_from_args", "field_docs", "flag_of"]

#: the sections ``--help`` lists without a method named (the others with ``--method M``)
SHORT_SECTIONS = ("run", "env")
#: the settings of those that ``--help`` lists without a method named
SHORT_SETTINGS = ("model", "method", "guide", "budget", "seed", "init", "wandb", "out", "name",
                  "address", "env_runners", "backend", "devices", "profile", "objective")
#: the sections of one method's own network
METHOD_SECTIONS = ("hsdag", "placeto", "rnn", "gdp")


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
    ap = Parser(
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
                text = first_sentence(text)
            add_field(group, cls, name, flag_of(section, name), f"{section}.{name}", default, text)
    for name, where in setting_index().items():  # --hidden-dim: every section's at once
        if len(where) > 1 and not (short or sections is not None and not set(where) & set(sections)):
            add_field(ap, SECTIONS[where[0]], name, "--" + name.replace("_", "-"), f"all.{name}",
                      getattr(getattr(defaults, where[0]), name),
                      f"{name} of every section that has it ({', '.join(where)}); a "
                      f"--section.{name.replace('_', '-')} flag wins")
    taken = {s for a in ap._actions for s in a.option_strings}
    for old, new in RETIRED.items():  # renamed settings' flags: an error naming the new one
        if "--" + old.replace("_", "-") not in taken:  # --no-fractal: the switch's own off flag
            retire_flag(ap, "--" + old.replace("_", "-"), new)
    if help_for:
        raise ValueError(f"no setting named {', '.join(help_for)}")
    return ap


def _first_line(cls: type) -> str:
    return (cls.__doc__ or "").strip().split("\n\n")[0].replace("\n    ", " ")


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
    elif m.approach == "rl":
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
    """The settings the flags gave (``section.name`` -> value), a name several sections
    share (``--hidden-dim``) first, so a ``--section.name`` flag wins over it."""
    given = {key: value for key, value in vars(args).items() if value is not None and "." in key}
    return {**{key.partition(".")[2]: v for key, v in given.items() if key.startswith("all.")},
            **{key: v for key, v in given.items() if key.partition(".")[0] in SECTIONS}}


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
