"""A run's settings, nested by section: flags, YAML files and run folders; a renamed
setting's old name is a one-sentence error naming the new one."""
import json
import subprocess
import sys

import pytest

from hsdag_ray.arguments import config_from_args
from hsdag_ray.cli import UsageError
from hsdag_ray.run.config import SECTIONS, TrainConfig, settings_of


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


def test_a_renamed_setting_names_its_new_flag_in_a_run_folder_yaml_and_flags(tmp_path):
    old = {"model": "tiny_cnn", "method": "rnn", "gcn_layers": 3}
    (tmp_path / "config.json").write_text(json.dumps({"train": old, "resolved": {}}))
    with pytest.raises(UsageError, match="'gcn_layers' in .*config.json was renamed; it is now "
                                         "--num-gcn-layers"):
        config_from_args(["--resume", str(tmp_path)])
    (tmp_path / "run.yaml").write_text("start_logit: 1.5\n")
    with pytest.raises(UsageError, match="'start_logit' in .*run.yaml was renamed; it is now --prior-logit"):
        config_from_args(["--config", str(tmp_path / "run.yaml")])
    for flags, new in ((["--timeout", "30"], "--timeout-s"), (["--gcn-layers", "3"], "--num-gcn-layers"),
                       (["--relative-features"], "--relative")):
        with pytest.raises(UsageError, match=f"^{flags[0]} was renamed; use {new}"):
            config_from_args(flags)


def test_a_switch_keeps_its_off_flag_and_a_shared_name_sets_every_section():
    cfg = config_from_args(["--no-fractal", "--hidden-dim", "48", "--hsdag.hidden-dim", "16",
                            "--timeout-s", "30"]).cfg
    assert cfg.features.fractal is False and cfg.timing.timeout_s == 30
    assert cfg.hsdag.hidden_dim == 16 and cfg.gdp.hidden_dim == 48  # the sectioned flag wins
    wide = TrainConfig.of(hidden_dim=8)
    assert {getattr(wide, s).hidden_dim for s in ("hsdag", "placeto", "rnn", "gdp")} == {8}


def test_a_choice_is_checked_by_its_type_on_the_command_line_and_in_yaml(tmp_path):
    """A setting typed with its choices (a ``Literal``, or a registry's names) refuses any
    other value, from a flag (the parser) or a file, in one sentence."""
    with pytest.raises(UsageError, match="argument --objective: invalid choice: 'fastest'"):
        config_from_args(["--objective", "fastest"])
    with pytest.raises(UsageError, match="argument --method: invalid choice: 'nope'"):
        config_from_args(["--method", "nope"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("env: {memory_penalty: soft}\n")
    with pytest.raises(UsageError, match="unknown memory_penalty 'soft'; choose one of graded, "
                                         "flat, repair .in .*bad.yaml"):
        config_from_args(["--config", str(bad)])
    with pytest.raises(UsageError, match="unknown backend 'tpu'; choose one of default, "):
        TrainConfig.of(backend="tpu")
    with pytest.raises(UsageError, match="unknown reward 'cube'; choose one of '', inverse"):
        TrainConfig.of(reward="cube")


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
    for section in ("run", "env", "timing", "features", "learning", "guide", "rnn"):
        assert f"\n{section} settings:" in out, section
    assert "\nhsdag settings:" not in out and "--rnn.hidden-dim" in out and "--grouper" in out
    assert "--no-fractal" in out and "--block" in out  # a library class's fields, help included


def test_every_command_that_measures_has_a_flag_of_every_timing_setting(capsys):
    """measure, apply and profile make their timing flags from TimingConfig's fields, as
    train does; a bad value is the class's own one-sentence check, an old flag names its
    new one."""
    import dataclasses

    from envs.base import TimingConfig
    from hsdag_ray import apply, measure, profile
    from hsdag_ray.cli import run

    flags = {"--" + f.name.replace("_", "-") for f in dataclasses.fields(TimingConfig)}
    for module in (measure, apply, profile, None):
        with pytest.raises(SystemExit):
            module.main(["--help"]) if module else config_from_args(["--method", "hsdag", "--help"])
        out = capsys.readouterr().out
        missing = {f for f in flags if f not in out} - {"--validate-outputs"}
        assert not missing, (module, missing)
    for argv, words in ((["--repeats", "0"], "repeats and block must be at least 1"),
                        (["--timeout", "5"], "--timeout was renamed; use --timeout-s instead"),
                        (["--precision-cap", "5"], "use --precision-cap-s instead")):
        assert run(measure.main, ["--model", "tiny_cnn", *argv], prog="m") == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err
