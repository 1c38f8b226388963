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


def test_every_setting_has_its_help_beside_it():
    """Each section's settings carry their help: the string under the field, or the
    field's entry in its class's ``Attributes:``; none is left without one."""
    from hsdag_ray.arguments import field_docs
    from hsdag_ray.run.config import SECTIONS, settings_of

    for section, cls in SECTIONS.items():
        docs = field_docs(cls)
        for name in settings_of(cls):
            assert len(docs.get(name, "").split()) >= 2, (section, name)
    assert "off: not; auto: with guide" in field_docs(SECTIONS["guide"])["exact_start"]


def test_an_attributes_line_starting_with_a_word_and_colon_continues_its_entry():
    """An attribute's text may have a line starting ``word:`` (``off: not``); it continues
    that attribute rather than starting an unknown one and losing the rest."""
    from hsdag_ray.arguments import field_docs

    class Settings:
        """Some settings.

        Attributes:
            start: on: measure the start first;
                off: not; auto: with guide.
            other / more: both documented
                on two lines.
        """

    docs = field_docs(Settings)
    assert docs["start"] == "on: measure the start first; off: not; auto: with guide."
    assert docs["other"] == docs["more"] == "both documented on two lines."


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
