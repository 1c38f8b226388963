"""End-to-end training runs: real Ray, a real RLlib training loop, real outputs."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hsdag_ray.train import TrainConfig, train


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_simulator_run_writes_every_output(tmp_path):
    cfg = TrainConfig(model="resnet50", budget=60, env_runners=0, wandb="offline", out=str(tmp_path),
                      name="sim", seed=1)
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
    from hsdag_ray.core.models import load_model

    ops = {op.get_friendly_name() for op in load_model("resnet50").get_ordered_ops()}
    best = json.loads((run / "best_placement.json").read_text())
    assert set(best) == ops and set(best.values()) <= {"CPU", "GPU_MODEL"}
    assert list((run / "wandb").glob("offline-run-*")), "W&B offline run folder"


def test_real_openvino_run_end_to_end(tmp_path):
    from envs.profiling import record

    # a profile of the same devices: the exact solver's placement is computed on it
    # and then measured on the devices like any other placement
    record("tiny_cnn", ["CPU", "CPU_F32"], fit=6, progress=False).save(tmp_path / "p.json")
    cfg = TrainConfig(model="tiny_cnn", backend="auto", devices=["CPU", "CPU_F32"], budget=40,
                      episode_len=10, env_runners=1, repeats=5, wandb="disabled", out=str(tmp_path),
                      name="real", profile=str(tmp_path / "p.json"))
    s = train(cfg, quiet=True)
    run = tmp_path / "real"
    assert s["backend"] == "openvino-auto" and s["objective"] == "measured"
    assert s["failures"] == 0 and s["measurements"] >= 3
    assert set(s["baselines"]) == {"CPU_only", "CPU_F32_only", "openvino_auto", "optimum"}
    assert 0 < s["baselines"]["optimum"] < 10 * s["baselines"]["CPU_only"]
    # AUTO over CPU + CPU_F32 can only pick the real CPU: about the CPU-only latency
    assert 0.25 < s["baselines"]["openvino_auto"] / s["baselines"]["CPU_only"] < 4
    # re-measured within the noise (the best of many noisy samples is optimistic)
    assert 0.5 * s["best_latency_s"] < s["best_remeasured_s"] < 2.0 * s["best_latency_s"]
    for f in ("best_placement.json", "summary.json", "learning_curve.png", "placement.png"):
        assert (run / f).exists(), f
    # the placement file is what hsdag_ray.measure takes
    r = subprocess.run([sys.executable, "-m", "hsdag_ray.measure", "--model", "tiny_cnn",
                        "--placement", str(run / "best_placement.json"), "--repeats", "3", "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["measurement"]["ok"]


def test_killed_env_runner_does_not_stop_the_run(tmp_path):
    cfg = TrainConfig(model="resnet50", budget=400, env_runners=2, wandb="disabled", out=str(tmp_path),
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


def test_resume_continues_iterations_and_keeps_the_best(tmp_path):
    cfg = TrainConfig(model="resnet50", budget=60, env_runners=0, wandb="disabled", out=str(tmp_path),
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


def test_train_bad_input(tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "hsdag_ray.train", *args], capture_output=True,
                              text=True, timeout=120)

    r = run("--model", "no_such_model", "--wandb", "disabled", "--out", str(tmp_path))
    assert r.returncode == 2 and "unknown model" in r.stderr and "Traceback" not in r.stderr
    bad = tmp_path / "c.yaml"
    bad.write_text("budget: 10\nbogus: 1\n")
    r = run("--config", str(bad))
    assert r.returncode == 2 and "bogus" in r.stderr and "Traceback" not in r.stderr
    r = run("--objective", "fastest")
    assert r.returncode == 2 and "objective" in r.stderr
    r = run("--resume", str(tmp_path / "nothing"))
    assert r.returncode == 2 and "not a run folder" in r.stderr
