"""What a sweep's trials ask Ray for can be held: a local sweep on real devices has its
measuring slot, and a cluster that could never hold a trial is one sentence, not a hang.

Ray Tune waits without a word for a placement group no machine can hold; these tests
stand a stand-in for ``tune.Tuner`` in, so a sweep that would hang fails instead."""
from __future__ import annotations

import pytest

from hsdag_ray import sweep
from hsdag_ray.run import sweeping
from hsdag_ray.cli import run
from hsdag_ray.run.config import MEASURE_RESOURCE

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process

REAL = ["--models", "tiny_cnn", "--methods", "random", "--seeds", "0", "--budget", "4",
        "--backend", "torch", "--wandb", "disabled"]


class _TunerStandIn(Exception):
    """Raised by the stand-in ``Tuner.fit``: the sweep got as far as starting its trials."""


def _stand_in_tuner(monkeypatch, on_fit=lambda: None) -> list:
    """``tune.Tuner`` replaced by one whose ``fit`` calls ``on_fit`` (Ray still up) and
    raises :class:`_TunerStandIn`; returns the list the trials' resources are put in."""
    from ray import tune

    asked = []
    real_resources = sweeping._resources

    def resources(sc, cfg):
        asked.append(real_resources(sc, cfg))
        return asked[-1]

    class Tuner:
        def __init__(self, *args, **kwargs):
            pass

        @staticmethod
        def can_restore(path):
            return False

        def fit(self):
            on_fit()
            raise _TunerStandIn

    monkeypatch.setattr(sweeping, "_resources", resources)
    monkeypatch.setattr(tune, "Tuner", Tuner)
    return asked


def test_unsatisfiable_names_the_missing_resource():
    from hsdag_ray.run.nodes import unsatisfiable

    machine = {"CPU": 2.0, "memory": 1e9}
    trial = [{"CPU": 1}, {MEASURE_RESOURCE: 1}]
    key, why = unsatisfiable(trial, [machine])
    assert key == MEASURE_RESOURCE and "none has it" in why
    assert unsatisfiable(trial, [{**machine, MEASURE_RESOURCE: 1}]) == ("", "")
    # two slots on one machine with one, and more GPUs than one machine has
    assert unsatisfiable([{"CPU": 1}] + [{MEASURE_RESOURCE: 1}] * 2,
                         [{**machine, MEASURE_RESOURCE: 1}])[0] == MEASURE_RESOURCE
    key, why = unsatisfiable([{MEASURE_RESOURCE: 1, "GPU": 2}],
                             [{MEASURE_RESOURCE: 1, "GPU": 1}, {"GPU": 1}])
    assert key == "GPU" and "the most one has is 1" in why
    # every resource somewhere, but never all of a bundle on one machine
    key, _ = unsatisfiable([{MEASURE_RESOURCE: 1, "GPU": 1}], [{MEASURE_RESOURCE: 1}, {"GPU": 1}])
    assert key
    assert unsatisfiable([{"CPU": 1}], [])[0] == "CPU"


@pytest.mark.own_ray
def test_a_local_sweep_on_real_devices_can_hold_its_trials(monkeypatch, tmp_path):
    """The local Ray a sweep with the torch backend starts holds a trial's bundles (its
    measuring slot): before, no trial ever started and the sweep waited forever."""
    import ray

    ready = []

    def place():
        [pgf] = asked
        pg = ray.util.placement_group(pgf.bundles, strategy=pgf.strategy)
        ready.append(pg.wait(timeout_seconds=30))
        ray.util.remove_placement_group(pg)

    asked = _stand_in_tuner(monkeypatch, place)
    assert not ray.is_initialized()
    with pytest.raises(_TunerStandIn):
        sweep.main(REAL + ["--out", str(tmp_path)])
    assert not ray.is_initialized()  # the sweep's own Ray, ended
    [pgf] = asked
    assert any(b.get(MEASURE_RESOURCE) for b in pgf.bundles)
    assert ready == [True], f"a trial's bundles {pgf.bundles} cannot be placed on the sweep's Ray"


@pytest.mark.own_ray
def test_a_sweep_whose_trials_can_never_start_says_why(monkeypatch, tmp_path, capsys):
    """On a Ray where no machine advertises a measuring slot, a sweep on real devices
    stops at once with one sentence naming the resource and how to provide it (exit 2)."""
    import ray

    from hsdag_ray.run.local_ray import start_local_ray

    _stand_in_tuner(monkeypatch)
    start_local_ray(num_cpus=2, log_to_driver=False, configure_logging=False)
    try:
        code = run(sweep.main, REAL + ["--out", str(tmp_path)], prog="hsdag_ray.sweep")
    finally:
        ray.shutdown()
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert f"'{MEASURE_RESOURCE}'" in err and "--resources=" in err


def test_a_trial_asks_for_the_device_set_it_will_measure_on(monkeypatch, tmp_path):
    """A cluster that names device sets and a torch sweep naming no devices: the trial's
    measuring bundle holds the set of the torch backend's default devices, the set its
    measuring actors will ask for (a bundle without it could never place them)."""
    from pathlib import Path

    from hsdag_ray.run import nodes

    cpus = "devices_cpu+cpu:bf16"
    monkeypatch.setattr(nodes, "_alive_resources", lambda: [
        {"CPU": 4.0, MEASURE_RESOURCE: 1.0, cpus: 1.0},
        {"CPU": 4.0, MEASURE_RESOURCE: 1.0, "devices_cpu+cuda:0": 1.0, "GPU": 1.0}])
    sc = sweep.config_from_args(REAL + ["--out", str(tmp_path)])
    [trial] = sweeping.trials(sc)
    pgf = sweeping._resources(sc, sc.trial_config(trial, Path(tmp_path)))
    import ray

    # the trial's driver on the sweep's machine (its run folder is read there), then the slot
    here = f"node:{ray.util.get_node_ip_address()}"
    assert pgf.bundles == [{"CPU": 1.0, here: 0.001}, {MEASURE_RESOURCE: 1.0, cpus: 1.0}]


@pytest.mark.slow
@pytest.mark.own_ray
def test_a_local_torch_sweep_runs_its_trials(tmp_path):
    """The sweep that used to wait forever, run for real: its trial measures on the
    torch backend's default devices and the sweep writes its table."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "hsdag_ray.sweep", *REAL, "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=1200, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    tables = list(tmp_path.rglob("results.md"))
    assert tables and "random" in tables[0].read_text()
