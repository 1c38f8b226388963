"""A run is resolved once: :func:`hsdag_ray.run.resolved_run.resolve_run` builds one
:class:`~hsdag_ray.run.resolved_run.ResolvedRun`, and train's start, driver and summary and the
in-process runner's measurer and learner receive that object."""
import dataclasses

import numpy as np
import pytest

from envs.graph_backend import make_backend
from hsdag_core.device_profile import cost_graph
from hsdag_ray.run import resolve
from hsdag_ray.run.config import TrainConfig
from hsdag_ray.run.resolved_run import ResolvedRun, resolve_run
from tests.test_inprocess import crossed_profile, layered_cnn

SIM = {"backend": "simulator", "devices": ["CPU", "GPU_SMALLMEM"], "model": "tiny_cnn"}


def _quiet(_):
    pass


@pytest.mark.parametrize("settings, want", [
    ({}, {"incumbent_prior": 0.0, "neighbour_every": 0, "guide_proposer": None, "reads_incumbent": False,
          "samples_around_incumbent": False, "starts_exact": False, "guide_parts": ()}),
    ({"guide": True}, {"incumbent_prior": 2.0, "neighbour_every": 10, "guide_proposer": "neighbours",
                       "reads_incumbent": True, "samples_around_incumbent": True, "starts_exact": True,
                       "guide_parts": ("exact start", "incumbent prior", "untried neighbours")}),
    ({"guide": True, "refit_every": 5}, {"incumbent_prior": 2.0, "neighbour_every": 0, "guide_proposer": "refit",
                                         "guide_parts": ("exact start", "incumbent prior", "refit's proposals")}),
    ({"incumbent_prior": 3.0, "incumbent": True}, {"incumbent_prior": 3.0, "reads_incumbent": True,
                                                  "guide_proposer": None, "guide_parts": ("incumbent prior",)}),
    ({"method": "random", "guide": True}, {"incumbent_prior": 0.0, "samples_around_incumbent": False,
                                           "neighbour_every": 10, "reads_incumbent": False}),
])
def test_the_derived_settings_are_those_the_steps_give(settings, want):
    cfg = TrainConfig.of(**SIM, **settings)
    run = resolve_run(cfg, _quiet)
    for name, value in want.items():
        assert getattr(run, name) == value, name
    # the same as each of resolve's steps gives, on the settings as given
    assert run.incumbent_prior == resolve.incumbent_prior(cfg)
    assert run.neighbour_every == resolve.neighbour_every(cfg)
    assert run.guide_proposer == resolve.guide_proposer(cfg)
    assert run.reads_incumbent == resolve.reads_incumbent(cfg)
    assert run.guide_parts == tuple(resolve.guide_parts(cfg, "simulator"))
    # the method reads plain numbers: --guide's choices written out
    assert run.cfg.hsdag.incumbent_prior == run.incumbent_prior
    assert run.cfg.guide.neighbour_every == run.neighbour_every
    assert run.env_config["incumbent"] == run.reads_incumbent
    assert run.env_config["suggestions"] == (run.guide_proposer is not None)
    assert run.given == cfg and run.settings == resolve.resolved(cfg)


def test_a_resolved_run_holds_the_backend_devices_profile_and_method_and_is_frozen():
    run = resolve_run(TrainConfig.of(**SIM, method="gdp"), _quiet, store="s")
    assert run.backend == "simulator" and run.devices == ("CPU", "GPU_SMALLMEM") and not run.real
    assert set(run.profile["devices"]) >= {"CPU", "GPU_SMALLMEM"}
    assert run.method.name == "gdp" and run.algo == "ppo" and run.cfg.learning.algo == "ppo"
    assert run.settings.learning.algo == ""  # config.json keeps the settings, not the run's choices
    assert run.reward == run.env_config["reward"] == run.method.reward
    assert run.env_config["store"] == "s" and list(run.env_config["devices"]) == ["CPU", "GPU_SMALLMEM"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.backend = "auto"
    more = run.with_runners(3, {"measure": 1})
    assert more.cfg.run.env_runners == 3 and more.resources == {"measure": 1}
    assert more.method_settings(1).hsdag.prior_device == 1 and more.method_settings().hsdag.prior_device == -1


def _spy(monkeypatch, module, name, calls):
    real = getattr(module, name)

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append((name, args, out))
        return out

    monkeypatch.setattr(module, name, spy)


def test_the_in_process_runner_resolves_once_and_hands_the_run_down(monkeypatch):
    from hsdag_ray.run import inprocess, resolved_run
    from hsdag_ray.run.inprocess import run_method

    graph = layered_cnn(6, c=8, size=8)
    prof = crossed_profile(graph)
    backend = make_backend("simulator", graph, profile=prof)
    costs = cost_graph(graph, prof, backend.devices)
    calls = []
    _spy(monkeypatch, resolved_run, "resolve_run", calls)
    seen = []
    real_learned = inprocess._run_learned
    monkeypatch.setattr(inprocess, "_run_learned", lambda run, *a: seen.append(run) or real_learned(run, *a))
    for helper in ("incumbent_prior", "neighbour_every", "guide_proposer", "reads_incumbent", "resolved"):
        _spy(monkeypatch, resolve, helper, calls)
    r = run_method("hsdag", graph, backend, costs, budget=6, settings={"episode_len": 3}, say=_quiet,
                   progress=False)
    assert np.isfinite(r["latency_s"])
    names = [name for name, _, _ in calls]
    assert names.count("resolve_run") == 1
    built = calls[names.index("resolve_run")][2]
    assert isinstance(built, ResolvedRun)
    assert seen == [built]  # the learner's loop receives the object resolve_run built
    # every derived setting is computed inside that one resolve_run (a spy records a call
    # when it returns): none after it, by the measurer, the features or the learner
    assert names[-1] == "resolve_run" and {"resolved", "guide_proposer", "reads_incumbent"} <= set(names)


@pytest.mark.ray  # runs train (a local Ray) in this process
def test_train_resolves_once_and_its_start_driver_and_summary_receive_the_run(monkeypatch, tmp_path):
    from hsdag_ray.run import training as train_module
    from hsdag_ray.run import drivers, resolved_run, run_start, summary

    calls = []
    _spy(monkeypatch, resolved_run, "resolve_run", calls)
    monkeypatch.setattr(train_module, "resolve_run", resolved_run.resolve_run)
    for module, name in ((run_start, "measure_start"), (drivers, "make_driver"), (summary, "finish")):
        _spy(monkeypatch, module, name, calls)
    monkeypatch.setattr(train_module, "measure_start", run_start.measure_start)
    cfg = TrainConfig.of(**SIM, method="random", budget=6, episode_len=3, wandb="disabled",
                         out=str(tmp_path), name="once", guide=True)
    s = train_module.train(cfg, quiet=True)
    assert s["guided_by"] == ["exact start", "untried neighbours"] and s["suggested_by"] == "neighbours"
    built = [out for name, _, out in calls if name == "resolve_run"]
    assert len(built) == 1
    received = {name: args[0] for name, args, _ in calls if name != "resolve_run"}
    assert set(received) == {"measure_start", "make_driver", "finish"}
    # the same run (the EnvRunners the cluster gives it filled in once Ray is up)
    first = received["measure_start"]
    assert received["make_driver"] is first and received["finish"] is first
    assert dataclasses.replace(first, cfg=built[0].cfg, resources=built[0].resources) == built[0]
