"""Every command the READMEs and results pages tell a user to run names flags its program accepts.

The main command runs verbatim in ``test_readme.py``; the others (sweeps,
pre-training, deploying, the benchmarks) take minutes to hours, so here each
one's arguments go through the program's own argument parser, exactly as
written (placeholders such as ``<run>`` are just strings to the parser), and
the program stops there. A README whose flags drifted from the code fails.
"""
from __future__ import annotations

import argparse
import importlib
import re
import runpy
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: the READMEs, the guide to placing unseen graphs and device sets, and the results pages
#: (docs/results/*.md), whose commands give their figures
DOCS = ("README.md", "cluster/README.md", "docs/transfer.md",
        *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "results").glob("*.md")))
PROGRAM = re.compile(r"^python (-m hsdag_ray\.\w+|bench/\w+\.py)\b")


def _bash_lines(text: str) -> list[str]:
    """Commands of the ```bash blocks, continuation lines joined, comments dropped."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


def _inline(text: str) -> list[str]:
    """Inline code spans (may wrap over lines) outside the fenced blocks, except a bare
    program name (prose naming a program, as in "`python -m hsdag_ray.apply` runs...")."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    spans = [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose)]
    return [span for span in spans if not PROGRAM.fullmatch(span)]


def readme_commands() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        text = (ROOT / doc).read_text()
        for line in _bash_lines(text) + _inline(text):
            for part in line.split("&&"):
                part = part.strip()
                if PROGRAM.match(part) and (doc, part) not in found:
                    found.append((doc, part))
    return found


class Parsed(BaseException):
    """Raised in place of running the program once its arguments parsed."""


@pytest.fixture
def parse_only(monkeypatch):
    original = argparse.ArgumentParser.parse_args

    def parse_args(self, args=None, namespace=None):
        raise Parsed(original(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_args)


def test_the_readmes_name_the_commands():
    programs = {PROGRAM.match(cmd).group(1) for _, cmd in readme_commands()}
    assert {"-m hsdag_ray.train", "-m hsdag_ray.sweep", "-m hsdag_ray.pretrain",
            "-m hsdag_ray.apply"} <= programs, programs


@pytest.mark.parametrize("doc,command", readme_commands(), ids=lambda v: v[:90])
def test_readme_command_parses(doc, command, parse_only, monkeypatch, capsys):
    argv = shlex.split(command)[1:]
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    with pytest.raises(Parsed):
        try:
            if argv[0] == "-m":
                module = importlib.import_module(argv[1])
                monkeypatch.setattr(sys, "argv", [argv[1], *argv[2:]])
                module.main(argv[2:])
            else:
                monkeypatch.setattr(sys, "argv", argv)
                runpy.run_path(str(ROOT / argv[0]), run_name="__main__")
        except SystemExit as exc:
            err = capsys.readouterr().err
            pytest.fail(f"{doc}: `{command}` does not parse (exit {exc.code}): {err[-500:]}")


def bench_train_flags() -> list[tuple[str, str]]:
    """The training settings a benchmark command passes on after ``--``."""
    found = []
    for doc, command in readme_commands():
        if command.startswith("python bench/") and " -- " in command:
            flags = " ".join(command.split(" -- ", 1)[1].split())
            if (doc, flags) not in found:
                found.append((doc, flags))
    return found


@pytest.mark.parametrize("doc,flags", bench_train_flags(), ids=lambda v: v[:90])
def test_bench_commands_pass_settings_train_accepts(doc, flags, parse_only, capsys):
    """A benchmark reads what follows ``--`` with train's own parser
    (hsdag_ray.arguments.config_from_args); those settings must parse there too."""
    from hsdag_ray.arguments import config_from_args

    with pytest.raises(Parsed):
        try:
            config_from_args(shlex.split(flags))
        except SystemExit as exc:
            err = capsys.readouterr().err
            pytest.fail(f"{doc}: `-- {flags}` is not a training setting (exit {exc.code}): {err[-500:]}")
