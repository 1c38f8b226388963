"""End-to-end training runs: real Ray, a real RLlib training loop, real outputs."""
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from hsdag_ray.run.config import TrainConfig
from hsdag_ray.run.training import train
from run_folder import read_jsonl

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process


@pytest.mark.slow  # tests/test_readme.py's main command runs train on ResNet-50 on the simulator in CI and checks the same outputs
def test_simulator_run_writes_every_output(tmp_path):
    cfg = TrainConfig.of(model="resnet50", budget=60, env_runners=0, wandb="offline", out=str(tmp_path),
                      name="sim", seed=1, backend="simulator", devices=["CPU", "GPU_MODEL"])
    summary = train(cfg, quiet=True)
    run = tmp_path / "sim"
    for f in ("config.json", "metrics.jsonl", "best_placement.json", "learning_curve.png",
              "placement.png", "summary.json", "checkpoint"):
        assert (run / f).exists(), f
    s = json.loads((run / "summary.json").read_text())
    for k in ("model", "method", "backend", "objective", "devices", "best_latency_s", "baselines",
              "speedup_vs_cpu", "measurements", "wall_s"):
        assert k in s, k
    assert s["backend"] == "simulator/sequential" and s["devices"] == ["CPU", "GPU_MODEL"]
    assert s["exact_start"] is False  # auto: the simulator measures with the run's own profile
    assert set(s["baselines"]) >= {"CPU_only", "GPU_MODEL_only", "optimum"}
    # the learner's best is never better than the exact optimum, never worse than CPU-only
    assert s["baselines"]["optimum"] <= s["best_latency_s"] * (1 + 1e-9)
    assert s["best_latency_s"] <= s["baselines"]["CPU_only"]
    assert s["speedup_vs_cpu"] == pytest.approx(1 - s["best_latency_s"] / s["baselines"]["CPU_only"])
    rows = read_jsonl(run / "metrics.jsonl")
    assert [r["iteration"] for r in rows] == list(range(1, len(rows) + 1))
    assert rows[-1]["placements"] >= 60 and s["measurements"] == rows[-1]["measurements"]
    assert all(r["num_groups"] and r["num_groups"] >= 1 for r in rows)
    # the best placement names every op of the model, on the run's devices
    from hsdag_core.models import load_model

    ops = {op.get_friendly_name() for op in load_model("resnet50").get_ordered_ops()}
    best = json.loads((run / "best_placement.json").read_text())
    assert set(best) == ops and set(best.values()) <= {"CPU", "GPU_MODEL"}
    assert list((run / "wandb").glob("offline-run-*")), "W&B offline run folder"


def test_real_openvino_run_end_to_end(tmp_path, capsys):
    from envs.profiling import record

    # a profile of the same devices: the exact solver's placement is computed on it
    # and then measured on the devices like any other placement
    record("tiny_cnn", ["CPU", "CPU_F32"], fit=3, progress=False).save(tmp_path / "p.json")
    cfg = TrainConfig.of(model="tiny_cnn", backend="auto", devices=["CPU", "CPU_F32"], budget=20,
                      episode_len=10, env_runners=1, repeats=5, precision=0, wandb="disabled", out=str(tmp_path),
                      name="real", profile=str(tmp_path / "p.json"))
    s = train(cfg, quiet=True)
    run = tmp_path / "real"
    assert s["backend"] == "openvino-auto" and s["objective"] == "measured"
    assert s["failures"] == 0 and s["measurements"] >= 3
    assert set(s["baselines"]) == {"CPU_only", "CPU_F32_only", "openvino_auto", "hetero_auto",
                                   "hetero_pipeline", "optimum"}
    assert 0 < s["baselines"]["optimum"] < 10 * s["baselines"]["CPU_only"]
    # AUTO over CPU + CPU_F32 can only pick the real CPU: about the CPU-only latency; HETERO's
    # own splits over CPU,CPU_F32 (default fallback, pipeline-parallel) both run here. The
    # factor is wide because these are real timings of a sub-millisecond model: where the
    # other test worker takes a core from a two-thread inference, one baseline's rounds
    # can all run 10-20x slower than the others'
    for name in ("openvino_auto", "hetero_auto", "hetero_pipeline"):
        assert 1 / 50 < s["baselines"][name] / s["baselines"]["CPU_only"] < 50, name
    assert "baselines_failed" not in s
    # every figure is re-measured: the best few placements and every baseline timed again
    # in interleaved rounds; the raw minimum over the run's noisy timings is a diagnostic
    rem = s["remeasured"]
    assert rem["rounds"] == 5 and rem["node"] == s["measured_on"]
    cands = rem["candidates"]
    assert {"CPU_only", "CPU_F32_only", "openvino_auto", "hetero_auto", "hetero_pipeline",
            "optimum", "method#1"} <= set(cands)
    for c in cands.values():
        xs = sorted(c["samples_s"])
        assert c["ok"] and len(xs) == 5 and c["latency_s"] == pytest.approx(xs[2])
        # spread: interquartile range / median of the rounds; range: (max - min) / median
        assert c["spread"] == pytest.approx((xs[3] - xs[1]) / xs[2])
        assert c["range"] == pytest.approx((xs[4] - xs[0]) / xs[2]) and c["range"] >= c["spread"]
    assert s["baselines"] == {k: cands[k]["latency_s"] for k in s["baselines"]}
    method = [c["latency_s"] for k, c in cands.items() if k.startswith("method#")]
    assert s["method_best_latency_s"] == min(method)
    if s["best_source"] == "learner":
        assert s["best_latency_s"] == min(method)
    else:
        assert s["best_latency_s"] == s["baselines"][s["best_source"].split(":")[1]]
    assert s["speedup_vs_cpu"] == pytest.approx(1 - s["best_latency_s"] / s["baselines"]["CPU_only"])
    assert 0.5 * s["best_raw_latency_s"] < s["method_best_latency_s"] < 2.0 * s["best_raw_latency_s"]
    assert s["best_spread"] is not None and s["best_spread"] >= 0
    for f in ("best_placement.json", "summary.json", "learning_curve.png", "placement.png"):
        assert (run / f).exists(), f
    # the placement file is what hsdag_ray.measure takes (its own process: tests/test_cli.py)
    from hsdag_ray.measure import main as measure_main

    capsys.readouterr()
    assert measure_main(["--model", "tiny_cnn", "--placement", str(run / "best_placement.json"),
                         "--repeats", "3", "--precision", "0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["measurement"]["ok"]


@pytest.mark.slow
def test_killed_env_runner_does_not_stop_the_run(tmp_path):
    cfg = TrainConfig.of(model="resnet50", budget=400, env_runners=2, wandb="disabled", out=str(tmp_path),
                      name="ft", checkpoint_every=100)
    killed: list = []

    def kill_one(algo, row):
        if row["iteration"] == 2:
            pids = algo.env_runner_group.foreach_env_runner(lambda r: os.getpid(),
                                                             local_env_runner=False)
            assert len(pids) == 2 and os.getpid() not in pids
            os.kill(pids[0], signal.SIGKILL)
            killed.append(pids[0])

    s = train(cfg, quiet=True, on_iteration=kill_one)
    assert killed, "no EnvRunner was killed"
    with pytest.raises(ProcessLookupError):
        os.kill(killed[0], 0)
    assert s["placements"] >= 400
    rows = read_jsonl(tmp_path / "ft" / "metrics.jsonl")
    assert rows[-1]["placements"] >= 400 and len(rows) > 2


@pytest.mark.slow
def test_resume_continues_iterations_and_keeps_the_best(tmp_path):
    cfg = TrainConfig.of(model="resnet50", budget=60, env_runners=0, wandb="disabled", out=str(tmp_path),
                      name="r", checkpoint_every=1)
    first = train(cfg, quiet=True)
    run = tmp_path / "r"
    n1 = len(read_jsonl(run / "metrics.jsonl"))
    r = subprocess.run([sys.executable, "-m", "hsdag_ray.train", "--resume", str(run), "--budget", "120"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = read_jsonl(run / "metrics.jsonl")
    assert [x["iteration"] for x in rows] == list(range(1, len(rows) + 1)) and len(rows) > n1
    second = json.loads((run / "summary.json").read_text())
    assert second["best_latency_s"] <= first["best_latency_s"]
    assert second["placements"] >= 120 and second["iterations"] == len(rows)
    assert second["measurements"] >= first["measurements"]


def test_train_bad_input(tmp_path, capsys):
    from tests.test_bad_inputs import one_error

    def says(*args):
        return one_error(capsys, "train", list(args))

    assert "unknown model" in says("--model", "no_such_model", "--wandb", "disabled", "--out", tmp_path)
    bad = tmp_path / "c.yaml"
    bad.write_text("budget: 10\nbogus: 1\n")
    assert "bogus" in says("--config", bad)
    assert "objective" in says("--objective", "fastest")
    assert "not a run folder" in says("--resume", tmp_path / "nothing")
    assert "--backend simulator" in says("--sim-profile", bad)  # a file, but not the simulator
    assert "--exact-start: invalid choice: 'maybe'" in says("--exact-start", "maybe")
    assert "does not exist" in says("--backend", "simulator", "--sim-profile", tmp_path / "none.json")
    # a backend asked for an objective it does not measure
    line = says("--backend", "auto", "--devices", "CPU,CPU_F32", "--objective", "throughput")
    assert "measures the sequential objective" in line and "--backend simulator or torch" in line


@pytest.mark.slow
def test_modeled_devices_named_on_the_command_line_need_no_profile(tmp_path):
    r = subprocess.run([sys.executable, "-m", "hsdag_ray.train", "--backend", "simulator",
                        "--devices", "CPU,GPU_SMALLMEM", "--model", "tiny_cnn", "--budget", "20",
                        "--episode-len", "10", "--env-runners", "0", "--wandb", "disabled",
                        "--out", str(tmp_path), "--name", "m"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads((tmp_path / "m" / "summary.json").read_text())
    assert s["devices"] == ["CPU", "GPU_SMALLMEM"] and "GPU_SMALLMEM_only" in s["baselines"]
    # a device that is neither real nor modeled is refused with one sentence
    r = subprocess.run([sys.executable, "-m", "hsdag_ray.train", "--backend", "simulator",
                        "--devices", "CPU,GPU_NOPE", "--model", "tiny_cnn", "--wandb", "disabled",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "GPU_NOPE" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_a_run_on_a_machine_its_profile_describes_wrongly(tmp_path):
    """--sim-profile: single devices and the exact solver's placement are measured on the
    simulated machine; that placement is solved on the run's own (wrong) profile."""
    from hsdag_core.coarsening import build_graph
    from hsdag_core.device_profile import MODELED_DEVICES, Profile, add_modeled_device

    _, fine, _, _ = build_graph("tiny_cnn", "none")
    paths = []
    for name, overhead in (("known", 1e-5), ("machine", 5e-4)):
        prof = Profile("tiny_cnn", {}, {})
        add_modeled_device(prof, fine, "CPU_MODEL")
        add_modeled_device(prof, fine, "GPU_X", dataclasses.replace(MODELED_DEVICES["GPU_MODEL"],
                                                                      op_overhead_s=overhead))
        # the second half of the ops runs far faster on the CPU: the optimum is a split,
        # not the single device the run starts from
        for op in list(prof.op_time_s["CPU_MODEL"])[len(prof.op_time_s["CPU_MODEL"]) // 2:]:
            prof.op_time_s["CPU_MODEL"][op] /= 1000.0
        prof.boundary_s = 1e-5
        prof.save(tmp_path / f"{name}.json")
        paths.append(tmp_path / f"{name}.json")
    runs = {}
    for name, extra in (("known", {"profile": str(paths[0])}),
                        ("wrong", {"profile": str(paths[0]), "sim_profile": str(paths[1])}),
                        ("machine", {"profile": str(paths[1])})):
        cfg = TrainConfig.of(model="tiny_cnn", backend="simulator", budget=10, episode_len=10,
                          env_runners=0, wandb="disabled", out=str(tmp_path), name=name, **extra)
        s = train(cfg, quiet=True)
        runs[name] = s["baselines"]
        # only where the profile is what is measured is its exact placement the optimum
        assert s["profile_measured"] == (name != "wrong")
    assert runs["wrong"]["GPU_X_only"] == pytest.approx(runs["machine"]["GPU_X_only"])
    assert runs["wrong"]["GPU_X_only"] > 2 * runs["known"]["GPU_X_only"]
    # solved on the wrong profile: never better than the machine's own optimum
    assert runs["wrong"]["optimum"] >= runs["machine"]["optimum"] * (1 - 1e-9)
    # auto: with --guide, on every backend; on and off as asked
    assert not TrainConfig().starts_exact("simulator") and not TrainConfig().starts_exact("auto")
    assert TrainConfig.of(guide=True, sim_profile=str(paths[1])).starts_exact("simulator")
    assert TrainConfig.of(exact_start="on").starts_exact("simulator")
    assert not TrainConfig.of(guide=True, exact_start="off").starts_exact("auto")
    # --exact-start: that placement is the run's first measurement, counted, for every
    # method alike (HSDAG and annealing then sample from the faster of it and their start)
    for method in ("hsdag", "anneal", "random"):
        cfg = TrainConfig.of(model="tiny_cnn", backend="simulator", profile=str(paths[0]),
                          sim_profile=str(paths[1]), exact_start="on", method=method, budget=10,
                          episode_len=5, env_runners=0, wandb="disabled", out=str(tmp_path),
                          name=f"exact-{method}", budget_unit="measurements")
        s = train(cfg, quiet=True)
        assert s["measurements"] >= 10
        from envs.store import placement_key

        run = tmp_path / f"exact-{method}"
        log = json.loads((run / "store.json").read_text())["log"]
        exact = json.loads((run / "state.json").read_text())["baselines"]["candidates"]["optimum"]
        assert 0 < sum(exact) < len(exact)
        first_is_exact = log[0]["key"].split(":")[-1] == placement_key("", np.asarray(exact))[1:]
        assert first_is_exact and s["exact_start"] and s["guided_by"] == ["exact start"]
        assert s["method_best_latency_s"] <= s["baselines"]["optimum"] * (1 + 1e-9)


@pytest.mark.slow
def test_an_optimum_the_solver_did_not_prove_is_reported_as_such(tmp_path):
    # the memory-limited MILP on Inception-V3's 216-node graph needs seconds to prove; 0.1 s
    # finds an incumbent (a gap of about 25% here) even on a loaded machine
    r = subprocess.run([sys.executable, "-m", "hsdag_ray.train", "--model", "inception_v3",
                        "--coarsen", "none", "--backend", "simulator",
                        "--devices", "CPU,GPU_SMALLMEM", "--solver-time-limit", "0.1",
                        "--budget", "20", "--episode-len", "10", "--env-runners", "0",
                        "--wandb", "disabled", "--out", str(tmp_path), "--name", "u"],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads((tmp_path / "u" / "summary.json").read_text())
    assert s["optimum_method"] == "milp" and s["optimum_proven"] is False and s["optimum_gap"] > 0
    assert "optimum (not proven)" in r.stdout
    # what the method was told is part of its figures
    assert s["cost_features"] is True and s["features"]["cost"] is True


@pytest.mark.slow
def test_a_run_whose_every_env_runner_fails_stops_and_says_why(tmp_path):
    """The model file disappears after the run started (a worker without it): the
    restarted EnvRunners cannot build their environment, no placement is measured,
    and the run stops with the workers' error instead of looping forever."""
    import shutil

    from hsdag_core.models import load_model

    import openvino as ov

    model = tmp_path / "m.xml"
    ov.save_model(load_model("tiny_cnn"), str(model))
    cfg = TrainConfig.of(model=str(model), backend="simulator", devices=["CPU", "GPU_MODEL"],
                      budget=200, episode_len=10, env_runners=1, wandb="disabled",
                      out=str(tmp_path / "runs"), name="broken")

    def remove_model(algo, row):
        if row["iteration"] == 1:
            shutil.move(str(model), str(tmp_path / "gone.xml"))
            shutil.move(str(model.with_suffix(".bin")), str(tmp_path / "gone.bin"))
            for pid in algo.env_runner_group.foreach_env_runner(lambda r: os.getpid(),
                                                                 local_env_runner=False):
                os.kill(pid, signal.SIGKILL)

    from hsdag_ray.cli import RunError

    t0 = time.time()
    with pytest.raises(RunError, match="does not exist"):
        train(cfg, quiet=True, on_iteration=remove_model)
    assert time.time() - t0 < 300


@pytest.mark.parametrize("flags,expected", [
    (["--no-cost"], {"features.cost": False}),
    (["--no-fractal", "--no-shape", "--no-op-type", "--no-degree"],
     {"features.fractal": False, "features.shape": False, "features.op_type": False,
      "features.degree": False}),
    (["--no-cost", "--cost"], {"features.cost": True}),
    (["--self-loops"], {"hsdag.self_loops": True}),
    (["--no-node-state-update"], {"hsdag.node_state_update": False}),
    (["--relative", "--num-gcn-layers", "3"], {"features.relative": True,
                                               "hsdag.num_gcn_layers": 3}),
])
def test_feature_ablation_flags_switch_features_off(flags, expected, tmp_path):
    """argparse reads any --no-... flag of a BooleanOptionalAction as False: --no-cost
    once left cost features on. The ablation flags must do what they say, on the
    command line and in a YAML file, flat (``cost: false``) or nested by section."""
    from hsdag_ray.arguments import config_from_args

    cfg = config_from_args(flags).cfg
    for key, v in expected.items():
        section, name = key.split(".")
        assert getattr(getattr(cfg, section), name) == v, (flags, key)
    yaml_cfg = tmp_path / "c.yaml"
    yaml_cfg.write_text("cost: false\n")
    assert config_from_args(["--config", str(yaml_cfg)]).cfg.features.cost is False
    assert config_from_args(["--config", str(yaml_cfg), "--cost"]).cfg.features.cost is True
    yaml_cfg.write_text("features: {cost: false}\nlearning: {lr: 0.02}\n")
    nested = config_from_args(["--config", str(yaml_cfg)]).cfg
    assert nested.features.cost is False and nested.learning.lr == 0.02
