"""Sweeps through Ray Tune: a small real sweep, its tables, the ablation preset, resuming."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hsdag_ray.run.results import read_csv
from hsdag_ray.run.sweeping import ABLATION_VARIANTS, SweepConfig, run_sweep, trials
from hsdag_ray.sweep import config_from_args, main

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process

ROOT = Path(__file__).resolve().parents[1]
MODELS = ["tiny_cnn", "tv:squeezenet1_1"]
#: a learned method and a search (tests/test_every_method.py runs every method)
METHODS = ["hsdag", "anneal"]
TINY = {"backend": "simulator", "env_runners": 0, "wandb": "disabled", "episode_len": 10}


def test_small_sweep_writes_the_comparison_table(tmp_path):
    """2 models x 2 methods x 2 seeds on the simulator: one run folder per trial and a
    table with one row per run plus the baselines the runs were compared with."""
    sc = SweepConfig(models=MODELS, methods=METHODS, seeds=[0, 1], budget=10, train=TINY,
                     out=str(tmp_path), name="ci")
    run_sweep(sc, say=lambda m: None)
    folder = tmp_path / "ci"
    rows = read_csv(folder / "results.csv")
    runs = [r for r in rows if r["kind"] == "run"]
    assert sorted((r["model"], r["method"], int(r["seed"])) for r in runs) == sorted(
        (m, k, s) for m in MODELS for k in METHODS for s in (0, 1))
    for r in runs:
        summary = json.loads((Path(r["run_dir"]) / "summary.json").read_text())
        assert Path(r["run_dir"]).parent == folder / "runs"
        assert r["best_latency_s"] == pytest.approx(summary["method_best_latency_s"])
        assert r["placements"] >= 10 and 1 <= r["measurements"] <= r["placements"]
        # the simulator is exact and the optimum proven: no method beats it
        assert r["optimum_proven"] is True and r["ratio_to_optimum"] >= 1 - 1e-9
        assert r["speedup_vs_cpu"] == pytest.approx(1 - r["best_latency_s"] / r["cpu_only_s"])
        # measurements and seconds to 1.01x of the best known, read off the run's curve
        curve = [json.loads(line) for line in (Path(r["run_dir"]) / "curve.jsonl").read_text().splitlines()]
        assert len(curve) == summary["measurements"]
        target = 1.01 * r["best_known_s"] * (1 + 1e-9)
        first = next((row for row in curve if (row["best_latency_s"] or float("inf")) <= target), None)
        assert r["to_1.01x"] == (first and first["measurement"])
        assert r["wall_to_1.01x"] == (first and pytest.approx(first["wall_s"]))
    assert any(r["to_1.01x"] is not None for r in runs)
    baselines = {(r["model"], r["method"]) for r in rows if r["kind"] == "baseline"}
    for m in MODELS:
        assert {(m, "CPU only"), (m, "GPU_SMALLMEM only"), (m, "optimum (milp)")} <= baselines
    md = (folder / "results.md").read_text()
    for m in MODELS:
        for k in METHODS:
            assert sum(line.startswith(f"| {m} | {k} |") for line in md.splitlines()) == 1
    assert "| to 1.01x | s to 1.01x |" in md
    assert (folder / "results.png").read_bytes()[:4] == b"\x89PNG"


def test_sweep_flags_and_file(tmp_path):
    f = tmp_path / "sweep.yaml"
    f.write_text("models: [tiny_cnn]\nmethods: [hsdag, anneal]\nseeds: [3]\nbudget: 40\n"
                 "train: {lr: 0.01}\n")
    sc = config_from_args(["--config", str(f), "--seeds", "1,2", "--out", str(tmp_path)])
    assert sc.models == ["tiny_cnn"] and sc.methods == ["hsdag", "anneal"] and sc.seeds == [1, 2]
    assert sc.budget == 40 and sc.train["lr"] == 0.01 and sc.train["backend"] == "simulator"
    names = [t["name"] for t in trials(sc)]
    assert len(names) == len(set(names)) == 4
    cfg = sc.trial_config(trials(sc)[0], tmp_path)
    assert (cfg.run.model, cfg.run.method, cfg.run.seed, cfg.run.budget, cfg.learning.lr) == ("tiny_cnn", "hsdag", 1, 40, 0.01)


def test_ablation_preset_switches_each_feature_group_off():
    sc = config_from_args(["--preset", "ablation", "--seeds", "0"])
    assert sc.models == ["resnet50", "inception_v3", "bert_base"] and sc.methods == ["hsdag"]
    grid = trials(sc)
    assert len(grid) == 3 * len(ABLATION_VARIANTS)
    feats = {t["variant"]: sc.trial_config(t, Path("/tmp")).features
             for t in grid if t["model"] == "resnet50"}
    full = feats["full"]
    assert full.fractal and full.degree and full.shape and full.position == "id"
    assert not feats["no structural"].fractal and not feats["no structural"].degree
    assert feats["no structural"].shape
    assert not feats["no output shape"].shape and feats["no output shape"].fractal
    assert feats["no node id"].position == "none" and feats["no node id"].shape


@pytest.mark.parametrize("argv,words", [
    (["--methods", "hsdag,nope"], "unknown method"),
    (["--seeds", "a,b"], "comma-separated list"),
    (["--config", "/nonexistent/sweep.yaml"], "does not exist"),
    (["--backend", "default"], "explicit backend"),
    (["--backend", "auto", "--methods", "hsdag,refit"], "--profile FILE"),
    (["--models", "resnet50,no_such_model"], "unknown model 'no_such_model'"),
    (["--models", "missing.onnx"], "does not exist"),
    (["--methods", "refit", "--objective", "parallel"], "models the sequential and throughput"),
    (["--objective", "fastest"], "unknown objective"),
])
def test_bad_sweep_input_is_one_sentence(argv, words, tmp_path, capsys):
    """The first case runs the command in a process of its own, the others call its main
    here as ``__main__`` does (one interpreter start, with Ray's imports, per case)."""
    if argv == ["--methods", "hsdag,nope"]:
        p = subprocess.run([sys.executable, "-m", "hsdag_ray.sweep", *argv, "--out", str(tmp_path)],
                           capture_output=True, text=True, cwd=ROOT, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
        code, err = p.returncode, p.stderr
    else:
        from hsdag_ray.cli import run
        from hsdag_ray.sweep import main

        try:
            code = run(main, [*argv, "--out", str(tmp_path)], prog="hsdag_ray.sweep")
        except SystemExit as e:  # argparse's own errors
            code = e.code
        err = capsys.readouterr().err
    assert code == 2, err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_every_method_by_default_leaves_out_those_the_settings_cannot_run():
    """A sweep of every method on real devices with no profile runs all but the ones
    that read a profile; on the simulator (which always has one) it runs them all."""
    from hsdag_ray.run.sweeping import _check
    from policies.registry import METHODS

    real = SweepConfig(models=["tiny_cnn"], seeds=[0], train={**TINY, "backend": "auto"})
    grid = _check(real)
    reads_profile = {"refit", "exact", "heft", "m-topo", "m-etf", "m-sct"}
    assert reads_profile <= set(METHODS) and not reads_profile & set(real.methods)
    assert {t["method"] for t in grid} == set(METHODS) - reads_profile
    sim = SweepConfig(models=["tiny_cnn"], seeds=[0], train=TINY)
    assert {t["method"] for t in _check(sim)} == set(METHODS)


@pytest.mark.slow
def test_a_killed_sweep_resumes_without_rerunning_finished_trials(tmp_path):
    """The driver is killed (with its whole local Ray) after some trials finished;
    the same command again finishes the others and runs none of the finished again."""
    argv = [sys.executable, "-m", "hsdag_ray.sweep", "--models", "tiny_cnn", "--methods",
            "random,anneal", "--seeds", "0,1,2,3", "--budget", "20", "--wandb", "disabled",
            "--out", str(tmp_path), "--name", "r", "--max-concurrent", "1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    runs = tmp_path / "r" / "runs"
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 240
        while time.time() < deadline and len(list(runs.glob("*/summary.json"))) < 2:
            time.sleep(0.5)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finished = {p.parent.name: p.stat().st_mtime_ns for p in runs.glob("*/summary.json")}
    assert 2 <= len(finished) < 8, "the sweep ended before it could be killed"
    assert main(argv[3:]) == 0
    after = {p.parent.name: p.stat().st_mtime_ns for p in runs.glob("*/summary.json")}
    assert len(after) == 8
    assert all(after[name] == t for name, t in finished.items())  # not run again
    rows = [r for r in read_csv(tmp_path / "r" / "results.csv") if r["kind"] == "run"]
    assert len(rows) == 8


@pytest.mark.own_ray
@pytest.mark.slow
def test_a_sweep_on_a_cluster_spreads_its_trials_over_the_machines(tmp_path):
    """Two machines with one CPU each and a head with none: the two trials run at the
    same time, one per machine."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    machines = {cluster.add_node(num_cpus=1).node_id for _ in range(2)}
    cluster.wait_for_nodes()
    try:
        sc = SweepConfig(models=["tiny_cnn"], methods=["random"], seeds=[0, 1], budget=10,
                         train=TINY, out=str(tmp_path), name="spread", address=cluster.address)
        run_sweep(sc, say=lambda m: None)
    finally:
        ray.shutdown()
        cluster.shutdown()
    rows = [r for r in read_csv(tmp_path / "spread" / "results.csv") if r["kind"] == "run"]
    nodes = {json.loads((Path(r["run_dir"]) / "summary.json").read_text())["measured_on"] for r in rows}
    assert len(rows) == 2 and nodes == machines


@pytest.mark.slow
def test_the_ablation_preset_writes_its_own_table(tmp_path):
    assert main(["--preset", "ablation", "--models", "tiny_cnn", "--seeds", "0", "--budget", "10",
                 "--wandb", "disabled", "--out", str(tmp_path)]) == 0
    md = (tmp_path / "ablation" / "results.md").read_text()
    assert md.startswith("## HSDAG feature ablation")
    for variant in ABLATION_VARIANTS:
        assert sum(line.startswith(f"| tiny_cnn | hsdag [{variant}] |") for line in md.splitlines()) == 1
    runs = [r for r in read_csv(tmp_path / "ablation" / "results.csv") if r["kind"] == "run"]
    feats = {r["variant"]: json.loads((Path(r["run_dir"]) / "summary.json").read_text())["features"]
             for r in runs}
    assert feats["no output shape"]["shape"] is False and feats["no node id"]["position"] == "none"
    assert feats["no structural"]["fractal"] is False and feats["full"]["fractal"] is True


DOPPLER = ROOT.parent / "shared" / "benchmarks" / "doppler"


def test_a_sweep_on_a_doppler_graph_scores_it_in_dopplers_simulator(tmp_path, monkeypatch):
    """``--models doppler:FILE`` with a path relative to where the sweep starts (each trial
    runs in a folder of its own), the parallel objective: HEFT and the exact solver
    (CP-SAT, started from HEFT's placement among others) each get a row, valued as
    DOPPLER's simulator values their best placement."""
    src = DOPPLER / "gdp_chain_mm_112nodes.txt"
    if not src.is_file():
        pytest.skip("DOPPLER's compute graphs (../shared/benchmarks/doppler) are not beside the project")
    from envs.simulator import Simulator
    from hsdag_core.doppler import load_doppler

    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "chain.txt").write_text(src.read_text())
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "sweep.yaml"
    config.write_text("train: {wandb: disabled, solver_time_limit: 2}\n")
    assert main(["--config", str(config), "--models", "doppler:g/chain.txt",
                 "--methods", "heft,exact", "--objective", "parallel", "--seeds", "0",
                 "--budget", "3", "--out", "sweeps", "--name", "d"]) == 0
    runs = {r["method"]: r for r in read_csv(tmp_path / "sweeps" / "d" / "results.csv")
            if r["kind"] == "run"}
    assert set(runs) == {"heft", "exact"}
    costs = load_doppler(src)
    sim = Simulator(costs)
    for method, r in runs.items():
        assert Path(r["run_dir"]).name == f"doppler_chain-{method}-s0"
        placed = json.loads((Path(r["run_dir"]) / "best_placement.json").read_text())
        best = [costs.devices.index(placed[nm]) for nm in costs.names]
        assert r["best_latency_s"] == pytest.approx(sim.evaluate(best, "parallel").value, rel=1e-9)
    assert runs["exact"]["best_latency_s"] <= runs["heft"]["best_latency_s"] * (1 + 1e-9)


@pytest.mark.parametrize("model,label", [
    ("tv:convnext_tiny", "tv_convnext_tiny"),
    ("gen:layered:n=30:c=32:w=3:seed=100", "gen_layered_n_30_c_32_w_3_seed_100"),
    ("hf:gpt2:layer_norm_epsilon=0.5", "hf_gpt2_layer_norm_epsilon_0.5"),  # not cut at the '.'
    ("models/net.onnx", "net"), ("resnet50", "resnet50"),
    ("doppler:graphs/8gpu_full_transformer.txt", "doppler_8gpu_full_transformer")])
def test_run_folders_are_named_without_characters_a_shell_or_scp_reads(model, label, tmp_path):
    """A train run's folder and a sweep trial's name (and a cached profile's) start with the
    same label: a file's stem, else the spec with ':' and '=' replaced (scp and rsync read
    'tv:...' as a host)."""
    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.rundir import Run

    run = Run(TrainConfig.of(model=model, out=str(tmp_path)), resume=None)
    assert run.dir.parent == tmp_path and run.dir.name.startswith(f"{label}-hsdag-")
    sc = SweepConfig(models=[model], methods=["hsdag"], seeds=[0], out=str(tmp_path))
    assert [t["name"] for t in trials(sc)] == [f"{label}-hsdag-s0"]
