"""Every command's --help prints its usage and exits 0 (a help text with a stray ``%``
once made argparse raise instead)."""
import importlib

import pytest

COMMANDS = ["train", "graph", "measure", "profile", "solve", "apply", "sweep", "pretrain"]


@pytest.mark.parametrize("name", COMMANDS)
def test_help_of_every_command(name, capsys):
    main = importlib.import_module(f"hsdag_ray.{name}").main
    try:
        code = main(["--help"])
    except SystemExit as stop:  # argparse's way; some commands return the code instead
        code = stop.code
    assert code in (0, None)
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m hsdag_ray.") or out.startswith("usage: ")
    assert "--help" in out and len(out.splitlines()) > 5
