"""The command line of a training run: a flag of every :class:`TrainConfig` field.

:func:`build_parser` makes a flag of every field (with the field's docstring as
its help) and :func:`config_from_args` fills a :class:`TrainConfig` from
``--config run.yaml``, a resumed run's ``config.json`` and the flags, flags winning.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import fields
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Optional, Sequence

from hsdag_ray.cli import UsageError
from hsdag_ray.config import TrainConfig

__all__ = ["Command", "build_parser", "config_from_args"]


def build_parser(help_for: Optional[Mapping[str, str]] = None,
                 description: Optional[str] = None) -> argparse.ArgumentParser:
    """The command line of every TrainConfig field; ``help_for`` replaces the help of
    fields whose meaning another command changes (e.g. pretrain's ``budget``);
    ``description`` heads ``--help``."""
    help_for = dict(help_for or {})
    ap = argparse.ArgumentParser(prog="python -m hsdag_ray.train", description=description,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", help="YAML file with any of the settings below (flags win)")
    ap.add_argument("--resume", metavar="RUN_DIR", help="continue the run in this folder")
    ap.add_argument("--verbose", action="store_true",
                    help="show the libraries' warnings and logs (torch, Ray, RLlib, W&B, "
                         "OpenVINO) on the console instead of the run's libraries.log")
    defaults = TrainConfig()
    doc = _field_docs()
    for f in fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name)
        help_text = doc.get(f.name, "")
        if f.name in help_for:
            ap.add_argument(flag, type=type(default), default=None, help=help_for.pop(f.name))
        elif isinstance(default, bool) and f.name.startswith("no_"):
            # argparse's BooleanOptionalAction reads any flag starting with --no- as False,
            # so --no-cost would switch cost features on: the pair is spelled out instead
            on = "--" + f.name[3:].replace("_", "-")
            ap.add_argument(flag, dest=f.name, action="store_const", const=True, default=None,
                            help=f"{help_text} ({on} undoes it)")
            ap.add_argument(on, dest=f.name, action="store_const", const=False,
                            help=argparse.SUPPRESS)
        elif isinstance(default, bool):
            ap.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif isinstance(default, list):
            ap.add_argument(flag, default=None, help=help_text + " (comma-separated)")
        else:
            ap.add_argument(flag, type=type(default), default=None,
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


def config_from_args(argv: Optional[Sequence[str]], description: Optional[str] = None) -> Command:
    args = build_parser(description=description).parse_args(argv)
    values: dict[str, Any] = {}
    resume = Path(args.resume) if args.resume else None
    if resume is not None:
        cfg_file = resume / "config.json"
        if not cfg_file.is_file():
            raise UsageError(f"{resume} is not a run folder (no config.json); pass the folder "
                             "a previous run printed")
        values.update(json.loads(cfg_file.read_text())["train"])
    if args.config:
        values.update(TrainConfig.from_yaml(args.config))
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
