"""A run's settings, nested by section: flags, YAML files and run folders, new and old."""
import json
import subprocess
import sys

import pytest

from hsdag_ray.arguments import config_from_args
from hsdag_ray.cli import UsageError
from hsdag_ray.config import RENAMED, SECTIONS, TrainConfig, settings_of


def test_the_settings_round_trip_through_config_json():
    cfg = TrainConfig.of(model="tiny_cnn", lr=0.02, devices="CPU,GPU_MODEL", grouper=True,
                         num_groups=4, fractal=False, **{"placeto.hidden_dim": 16})
    again = TrainConfig().with_settings(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg
    assert (again.learning.lr, again.env.devices, again.rnn.num_groups) == (0.02, ("CPU", "GPU_MODEL"), 4)
    assert again.placeto.hidden_dim == 16 and again.hsdag.hidden_dim == 64
    # every section's every setting is in the file, nested by section
    assert {s: set(v) for s, v in cfg.to_dict().items()} == \
        {s: set(settings_of(cls)) for s, cls in SECTIONS.items()}


def test_a_run_folder_of_an_earlier_release_resumes(tmp_path):
    """An earlier release wrote config.json flat, with names since renamed; it still loads."""
    old = {"model": "tiny_cnn", "method": "rnn", "backend": "simulator", "budget": 40,
           "hidden_dim": 32, "gcn_layers": 3, "start_logit": 1.5, "timeout": 60.0,
           "rnn_groups": 8, "no_cost": True, "no_fractal": False, "relative_features": True,
           "incumbent_prior": -1.0, "guide": False, "exact_start": "auto", "devices": ["CPU", "GPU_MODEL"]}
    (tmp_path / "config.json").write_text(json.dumps({"train": old, "resolved": {}}))
    cfg = config_from_args(["--resume", str(tmp_path)]).cfg
    assert (cfg.run.model, cfg.run.method, cfg.run.budget) == ("tiny_cnn", "rnn", 40)
    assert cfg.hsdag.num_gcn_layers == 3 and cfg.hsdag.prior_logit == 1.5
    assert cfg.timing.timeout_s == 60.0
    assert cfg.rnn.grouper and cfg.rnn.num_groups == 8
    assert all(getattr(cfg, s).hidden_dim == 32 for s in ("hsdag", "placeto", "rnn", "gdp"))
    assert cfg.features.cost is False and cfg.features.fractal is True and cfg.features.relative
    assert cfg.env.devices == ("CPU", "GPU_MODEL")


def test_old_flags_still_parse_and_a_shared_name_needs_its_section():
    cfg = config_from_args(["--gcn-layers", "3", "--rnn-groups", "0", "--hidden-dim", "48",
                            "--hsdag.hidden-dim", "16", "--timeout", "30"]).cfg
    assert cfg.hsdag.num_gcn_layers == 3 and not cfg.rnn.grouper and cfg.timing.timeout_s == 30
    assert cfg.hsdag.hidden_dim == 16 and cfg.gdp.hidden_dim == 48  # the sectioned flag wins
    # the flat name of an earlier release sets every method's width, as it did then
    wide = TrainConfig.of(hidden_dim=8)
    assert [s for s, _, _ in RENAMED["hidden_dim"](8)] == ["hsdag", "placeto", "rnn", "gdp"]
    assert {getattr(wide, s).hidden_dim for s in ("hsdag", "placeto", "rnn", "gdp")} == {8}


def test_bad_settings_are_one_sentence_naming_the_fix(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("learning: {grouping_noise: 0.5}\n")
    with pytest.raises(UsageError, match="'grouping_noise' in section 'learning' of .*bad.yaml is not "
                                         "a learning setting; it is a hsdag setting"):
        config_from_args(["--config", str(bad)])
    with pytest.raises(UsageError, match="unknown setting 'lrr' in the settings"):
        TrainConfig.of(lrr=0.1)
    with pytest.raises(UsageError, match="'lr' is not a hsdag setting"):
        TrainConfig.of(**{"hsdag.lr": 0.1})
    with pytest.raises(UsageError, match="bad rnn setting .*num_groups must be at least 1"):
        TrainConfig.of(num_groups=0)
    p = subprocess.run([sys.executable, "-m", "hsdag_ray.train", "--config", str(bad)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "it is a hsdag setting" in p.stderr.strip().splitlines()[-1]


def test_method_help_groups_the_settings_by_section(capsys):
    from hsdag_ray.train import main

    with pytest.raises(SystemExit):
        main(["--method", "rnn", "--help"])
    out = capsys.readouterr().out
    for section in ("run", "env", "timing", "features", "learning", "aids", "rnn"):
        assert f"\n{section} settings:" in out, section
    assert "\nhsdag settings:" not in out and "--rnn.hidden-dim" in out and "--grouper" in out
    assert "--no-fractal" in out and "--block" in out  # a library class's fields, help included
