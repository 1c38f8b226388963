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


def test_train_help_keeps_every_line_of_an_attributes_text():
    """An attribute's text may have a line starting ``word:`` (``off: not``); it continues
    that attribute rather than starting an unknown one and losing the rest."""
    import re

    from hsdag_ray.arguments import _field_docs
    from hsdag_ray.config import TrainConfig

    docs = _field_docs()
    assert "off: not; auto: with guide" in docs["exact_start"]
    assert "or best_single (the fastest" in docs["start"]
    assert set(docs) <= {f for f in TrainConfig.__dataclass_fields__}
    # every word of the Attributes block reaches some field's help
    block = (TrainConfig.__doc__ or "").split("Attributes:")[-1]
    words = set(re.findall(r"[a-z]{4,}", block))
    assert words <= set(re.findall(r"[a-z]{4,}", " ".join(docs) + " " + " ".join(docs.values())))


def test_train_help_names_every_registered_backend(capsys):
    """The help of --backend is written beside the field; it must not drift from the registry."""
    from envs.backends import BACKENDS
    from hsdag_ray.train import main

    with pytest.raises(SystemExit):
        main(["--help"])
    import re

    out = capsys.readouterr().out
    section = re.search(r"\n  --backend BACKEND(.*?)\n  --", out, re.S).group(1)
    for name in BACKENDS:
        assert f"``{name}``" in section, (name, section)
