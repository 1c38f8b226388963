"""docs/architecture.md's recipe "A new setting of train", followed at test time: a field
added to a section class (here the environment's, by a subclass put in its section's
place) is a flag with its help in ``--help``, a key of a YAML file, checked by its type
and by the class's own range check, kept in ``config.json`` and part of the environment
config the run resolves."""
from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from envs.env_config import EnvConfig
from hsdag_ray.arguments import config_from_args
from hsdag_ray.cli import UsageError
from hsdag_ray.run.config import SECTIONS, TrainConfig
from hsdag_ray.run.resolve import env_config


@dataclass(frozen=True)
class EnvWithPatience(EnvConfig):
    settle_patience: int = 3
    """episodes without a new best after which the environment settles (the recipe's
    example setting)."""

    def range_error(self) -> str:
        return super().range_error() or (
            "settle_patience must be 0 or more" if self.settle_patience < 0 else "")


@pytest.fixture
def recipe(monkeypatch):
    monkeypatch.setitem(SECTIONS, "env", EnvWithPatience)


def test_a_new_setting_is_in_help_yaml_config_json_and_the_env_config(recipe, tmp_path, capsys):
    with pytest.raises(SystemExit):
        config_from_args(["--method", "hsdag", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--settle-patience N episodes without a new best after which the environment " \
           "settles (the recipe's example setting) (default: 3)" in out

    assert TrainConfig().env.settle_patience == 3
    assert config_from_args(["--settle-patience", "7"]).cfg.env.settle_patience == 7
    for text in ("env: {settle_patience: 5}\n", "settle_patience: 5\n"):
        (tmp_path / "run.yaml").write_text(text)
        cfg = config_from_args(["--config", str(tmp_path / "run.yaml")]).cfg
        assert cfg.env.settle_patience == 5, text

    kept = json.loads(json.dumps(cfg.to_dict()))  # what config.json keeps
    assert kept["env"]["settle_patience"] == 5
    assert TrainConfig().with_settings(kept).env.settle_patience == 5  # a resumed run reads it

    resolved = env_config(cfg, "simulator", ["CPU_MODEL", "GPU_MODEL"], None, "")
    assert resolved["settle_patience"] == 5
    built = EnvWithPatience.from_dict(resolved)
    assert built.settle_patience == 5 and built.backend == "simulator"


def test_a_new_setting_is_checked_by_its_type_and_its_class(recipe):
    with pytest.raises(UsageError, match="argument --settle-patience: invalid int value: 'soon'"):
        config_from_args(["--settle-patience", "soon"])
    with pytest.raises(UsageError, match="^settle_patience must be 0 or more$"):
        config_from_args(["--settle-patience", "-1"])
