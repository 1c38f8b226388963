"""Every method runs as published unless ``--guide``, and the guide helps every method alike.

Real runs on the simulator (tiny_cnn, a modeled accelerator), real RLlib and Ray; the
settings' defaults are read from the dataclasses that hold them, so two places that
disagree fail here.
"""
import dataclasses
import json

import pytest

from hsdag_ray.run.config import SECTIONS, TrainConfig
from hsdag_ray.run.resolve import guide_parts, resolved
from hsdag_ray.run.training import train

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process


def test_methods_are_published_by_default_and_guided_on_request():
    for method in ("hsdag", "placeto", "rnn", "gdp", "random", "anneal", "refit", "exact", "heft"):
        plain = resolved(TrainConfig.of(method=method))
        assert guide_parts(plain, "simulator") == [], method
        assert plain.hsdag.incumbent_prior == 0 and plain.guide.neighbour_every == 0
        assert not plain.starts_exact("auto")
    hsdag = resolved(TrainConfig.of(method="hsdag"))
    assert hsdag.hsdag.node_moves is False and hsdag.learning.episode_len == 20
    assert hsdag.learning.lr == 1e-3
    guided = resolved(TrainConfig.of(method="hsdag", guide=True))
    assert guide_parts(guided, "simulator") == ["exact start", "incumbent prior", "untried neighbours"]
    # the same aids for a policy without an incumbent prior, that one left out
    placeto = resolved(TrainConfig.of(method="placeto", guide=True))
    assert guide_parts(placeto, "simulator") == ["exact start", "untried neighbours"]
    # a setting given explicitly wins over the guide
    assert resolved(TrainConfig.of(guide=True, neighbour_every=0)).guide.neighbour_every == 0


def test_no_two_places_disagree_on_a_default():
    """The run's sections are the library's own config classes (the environment's, the
    method's) or the run's own; the environment is built from the env section itself,
    and every setting has one section but the width every learned method has."""
    from envs.env_config import EnvConfig
    from hsdag_ray.run.config import setting_index
    from hsdag_ray.run.resolve import env_config
    from policies.hsdag.config import HSDAGConfig

    defaults = TrainConfig()
    run = resolved(defaults)
    assert run.hsdag == HSDAGConfig()  # the run decides incumbent_prior: 0 without --guide
    assert defaults.hsdag.incumbent_prior == -1
    assert SECTIONS["env"] is EnvConfig and type(defaults.env) is EnvConfig
    env = EnvConfig()
    built = env_config(run, "simulator", ["CPU", "GPU_MODEL"], None, "")
    for name in ("model", "coarsen", "objective", "episode_len", "failure_factor",
                 "memory_penalty", "sim_delay_s", "incumbent", "incumbent_share", "screen",
                 "input_shape", "reward"):
        assert built[name] == getattr(env, name), name
    # a flat name means one setting, but hidden_dim, which every learned method has
    shared = {name: where for name, where in setting_index().items() if len(where) > 1}
    assert shared == {"hidden_dim": ("hsdag", "placeto", "rnn", "gdp")}
    assert set(SECTIONS) == {f.name for f in dataclasses.fields(TrainConfig)}


def test_short_help_lists_the_runs_settings_and_method_help_adds_the_rest(capsys):
    from hsdag_ray.train import main

    with pytest.raises(SystemExit):
        main(["--help"])
    short = capsys.readouterr().out
    assert len(short.splitlines()) <= 80
    assert "--guide" in short and "--budget" in short and "--node-moves" not in short
    with pytest.raises(SystemExit):
        main(["--method", "hsdag", "--help"])
    full = capsys.readouterr().out
    assert "--node-moves" in full and "--incumbent-prior" in full and "--lr" in full
    # hidden settings still parse
    from hsdag_ray.arguments import config_from_args

    cfg = config_from_args(["--node-moves", "--lr", "0.002"]).cfg
    assert cfg.hsdag.node_moves is True and cfg.learning.lr == 0.002


def _run(tmp_path, name, **kw):
    cfg = TrainConfig.of(model="tiny_cnn", backend="simulator", devices=["CPU", "GPU_MODEL"],
                      env_runners=0, wandb="disabled", out=str(tmp_path), name=name,
                      episode_len=10, **kw)
    train(cfg, quiet=True)
    s = json.loads((tmp_path / name / "summary.json").read_text())
    log = json.loads((tmp_path / name / "store.json").read_text())["log"]
    return s, log


def test_the_guide_helps_a_policy_without_an_incumbent_prior(tmp_path):
    """Placeto guided: the exact solver's placement is the run's first measurement and the
    untried neighbours of the best are measured too, all marked as the guide's."""
    s, log = _run(tmp_path, "placeto", method="placeto", budget=40, guide=True)
    assert s["guided_by"] == ["exact start", "untried neighbours"]
    assert log[0]["suggested"] and log[0]["latency_s"] == pytest.approx(s["baselines"]["optimum"])
    assert s["suggested"] == sum(1 for e in log if e.get("suggested")) >= 2
    assert s["best_from_guide"]
    assert len(s["latencies_s"]) == s["measurements"]
    plain, log = _run(tmp_path, "plain", method="placeto", budget=20)
    assert plain["guided_by"] == [] and plain["suggested"] == 0
    assert not any(e.get("suggested") for e in log)


def test_the_guide_helps_a_search(tmp_path):
    s, log = _run(tmp_path, "random", method="random", budget=40, guide=True)
    assert s["guided_by"] == ["exact start", "untried neighbours"]
    assert sum(1 for e in log if e.get("suggested")) >= 3  # the start and its neighbours


def test_solvers_are_methods_measured_once(tmp_path):
    for method in ("exact", "heft"):
        s, log = _run(tmp_path, method, method=method, budget=50)
        assert s["measurements"] == 1 and s["placements"] == 1 and s["iterations"] == 1
        if method == "exact":
            assert s["method_best_latency_s"] == pytest.approx(s["baselines"]["optimum"])


def test_measurements_to_a_target_and_the_sweep_table():
    from hsdag_ray.run.results import add_targets, markdown, measurements_to

    assert measurements_to([3.0, None, 2.0, 1.04, 1.0], 1.05) == 4
    assert measurements_to([3.0, 2.0], 1.0) is None
    base = {"kind": "run", "model": "m", "variant": "", "seed": 0, "speedup_vs_cpu": None,
            "ratio_to_optimum": None, "optimum_s": 1.0, "optimum_proven": True, "wall_s": 1.0}
    rows = [base | {"method": "hsdag", "guide": "as published", "best_latency_s": 1.02,
                    "latencies_s": [2.0, 1.5, 1.02], "measurements": 3},
            base | {"method": "hsdag", "guide": "guided", "best_latency_s": 1.0,
                    "latencies_s": [1.0, 1.3], "measurements": 2}]
    add_targets(rows)
    assert [r["to_1.05x"] for r in rows] == [3, 1] and [r["to_1.01x"] for r in rows] == [None, 1]
    table = markdown(rows)
    assert "| m | hsdag | as published |" in table and "| m | hsdag | guided |" in table
    assert "| >3 (0/1 runs) |" in table  # never within 1.01x: its measurements, marked


def test_method_help_lists_its_departures_from_the_paper(capsys):
    from hsdag_ray.train import main
    from policies.registry import METHODS

    for name in ("hsdag", "rnn", "gdp"):
        assert METHODS[name].departures, name
        with pytest.raises(SystemExit):
            main(["--method", name, "--help"])
        out = " ".join(capsys.readouterr().out.split())
        assert "Departures from the paper" in out
        assert all(" ".join(d.split()) in out for d in METHODS[name].departures)


def test_a_yaml_config_nests_its_settings_by_section(tmp_path):
    from hsdag_ray.arguments import config_from_args
    from hsdag_ray.cli import UsageError

    good = tmp_path / "run.yaml"
    good.write_text("run: {model: tiny_cnn, budget: 30, guide: true}\nhsdag: {grouping_noise: 0.5}\n"
                    "learning: {lr: 0.002}\nseed: 3\n")
    cfg = config_from_args(["--config", str(good)]).cfg
    assert (cfg.run.model, cfg.run.budget, cfg.run.guide, cfg.hsdag.grouping_noise, cfg.learning.lr, cfg.run.seed) == \
        ("tiny_cnn", 30, True, 0.5, 0.002, 3)
    bad = tmp_path / "bad.yaml"
    bad.write_text("hsdag: {lr: 0.1}\n")
    with pytest.raises(UsageError, match="'lr' in section 'hsdag' of .*bad.yaml is not a hsdag setting"):
        config_from_args(["--config", str(bad)])


def test_the_methods_page_lists_every_method_and_departure():
    from pathlib import Path

    from policies.registry import METHODS

    page = " ".join((Path(__file__).resolve().parents[1] / "docs" / "methods.md").read_text().split())
    for m in METHODS.values():
        assert f"## `{m.name}` ({m.approach})" in page and " ".join(m.description.split()) in page
        for d in m.departures:
            assert " ".join(d.split()) in page, d
