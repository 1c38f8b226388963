"""Faults injected into real runs: SIGKILL at any moment, interrupted and killed sweeps, a killed
measuring node (docs/reliability.md lists them and what a run does on each; damaged checkpoints
are in test_checkpoints.py)."""
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from run_folder import checkpoint_names, keys, rows, stores

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict:
    return {**os.environ, "PYTHONUNBUFFERED": "1", "WANDB_MODE": "disabled"}


def start(args: list[str], log: Path) -> subprocess.Popen:
    """A command in its own session (its Ray processes with it), output to ``log``."""
    f = log.open("ab")
    return subprocess.Popen(args, cwd=ROOT, env=_env(), stdout=f, stderr=subprocess.STDOUT,
                            start_new_session=True)


def kill(proc: subprocess.Popen) -> None:
    """SIGKILL the command and every process of its session (its local Ray)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def reap(proc: subprocess.Popen) -> None:
    """After the command ended, what its session left running (Ray's processes) is killed."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass




def kill_when(proc: subprocess.Popen, run: Path, condition, timeout: float = 240.0) -> bool:
    """Poll the run folder; SIGKILL the run as soon as ``condition(run)`` holds. False if
    the run ended first."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        if condition(run):
            kill(proc)
            return True
        if proc.poll() is not None:
            reap(proc)
            return False
        time.sleep(0.02)
    kill(proc)
    raise AssertionError(f"the kill condition never held in {timeout:.0f} s")


def kill_and_resume(run: Path, log: Path, first: list[str], kills) -> tuple[list[str], set[str]]:
    """Start ``first``, SIGKILL it when each of ``kills`` (moment, condition factory) holds,
    resume it each time with ``--resume``, then let it finish. The moments a kill came in
    time for, and every measured placement a store held before a kill."""
    resume = [sys.executable, "-m", "hsdag_ray.train", "--resume", str(run)]
    seen: set[str] = set()
    killed = []
    for i, (moment, condition) in enumerate(kills):
        # killed before it wrote config.json: not a run folder yet, its command is run again
        proc = start(resume if (run / "config.json").is_file() else first, log)
        if kill_when(proc, run, condition()):
            killed.append(moment)
        else:
            assert proc.returncode == 0, log.read_text()[-3000:]
        for s in stores(run):
            seen.update(keys(s))
    proc = start(resume, log)
    assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    reap(proc)
    return killed, seen


def check_consistent(run: Path, log: Path, seen: set[str], budget: int) -> None:
    """Every iteration once in metrics.jsonl, the summary's counts the store's, no
    measurement lost, the latest two checkpoints kept."""
    out = log.read_text()
    summary = json.loads((run / "summary.json").read_text())
    final = json.loads((run / "store.json").read_text())
    state = json.loads((run / "state.json").read_text())
    its = [r["iteration"] for r in rows(run)]
    assert its == list(range(1, state["iteration"] + 1)), its
    assert summary["iterations"] == state["iteration"]
    assert summary["measurements"] == len(final["log"]) == rows(run)[-1]["measurements"]
    assert summary["placements"] >= budget
    assert seen <= keys(final), seen - keys(final)
    assert "resumed" in out and "outputs in" in out
    names = sorted(n for n in checkpoint_names(run) if n.isdigit())
    assert len(names) == 2 and int(names[-1]) == state["iteration"]
    assert (run / "checkpoint").resolve() == (run / "checkpoints" / names[-1] / "policy").resolve()


def iteration(run: Path) -> int:
    return max((r["iteration"] for r in rows(run)), default=0)


def new_folder(run: Path, kind: str):
    before = checkpoint_names(run)
    return lambda r: any(n.startswith(kind) for n in checkpoint_names(r) - before)


def after_row(run: Path):
    n = iteration(run)
    return lambda r: iteration(r) > n


def after(seconds: float):
    t = time.time() + seconds
    return lambda r: time.time() >= t


def printed(log: Path, text: bytes):
    """True once the session started now prints ``text`` (the log holds earlier sessions')."""
    size = log.stat().st_size if log.exists() else 0
    return lambda r: text in log.read_bytes()[size:]


def sim_run(profile: Path, out: Path, name: str, budget: int) -> list[str]:
    return [sys.executable, "-m", "hsdag_ray.train", "--backend", "simulator", "--model", "tiny_cnn",
            "--profile", str(profile), "--devices", "CPU_MODEL,GPU_MODEL", "--env-runners", "0",
            "--wandb", "disabled", "--checkpoint-every", "1", "--budget", str(budget),
            "--out", str(out), "--name", name]


@pytest.mark.slow  # two minutes of SIGKILLs; CI keeps the damaged-checkpoint and torn-metrics resume tests
def test_a_run_killed_at_any_moment_resumes_with_every_iteration_once(tmp_path, tiny_profile_file):
    """SIGKILL a simulator run (and its local Ray) at five different moments: while its
    first checkpoint is written, between a metrics row and its checkpoint, while a later
    checkpoint is written, right after one is renamed into place, and early at a random
    moment; resume each time. Every iteration is in metrics.jsonl exactly once, no
    measurement a store held before a kill is lost, the summary counts what the store
    holds; and with no checkpoint left, --resume is refused in one sentence."""
    rng = random.Random(0)
    run, log, budget = tmp_path / "killed", tmp_path / "out.log", 100  # 5 iterations of 20
    kills = [
        ("while the first checkpoint is written", lambda: new_folder(run, ".tmp-")),
        ("right after a metrics row, before its checkpoint", lambda: after_row(run)),
        ("while a checkpoint is written", lambda: new_folder(run, ".tmp-")),
        ("right after a checkpoint is renamed into place", lambda: new_folder(run, "0")),
        ("at a random moment", lambda: after(rng.uniform(2.0, 10.0))),
    ]
    killed, seen = kill_and_resume(run, log, sim_run(tiny_profile_file, tmp_path, "killed", budget),
                                   kills)
    assert len(killed) == 5, killed
    check_consistent(run, log, seen, budget)

    # no checkpoint left: --resume ends in one sentence, exit 2, and never starts afresh
    import shutil

    shutil.rmtree(run / "checkpoints")
    r = subprocess.run([sys.executable, "-m", "hsdag_ray.train", "--resume", str(run)], cwd=ROOT,
                       env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("hsdag_ray.train: error:") and "cannot be resumed" in last
    assert "Traceback" not in r.stderr


# interrupted sweeps ------------------------------------------------------------------------


def sweep_cmd(tmp_path: Path, profile: Path, seeds: str) -> list[str]:
    cfg = tmp_path / "sweep.yaml"
    cfg.write_text(json.dumps({"train": {"backend": "simulator", "env_runners": 0, "wandb": "disabled",
                                         "profile": str(profile), "devices": ["CPU_MODEL", "GPU_MODEL"],
                                         "episode_len": 10, "checkpoint_every": 1}}))
    return [sys.executable, "-m", "hsdag_ray.sweep", "--config", str(cfg), "--models", "tiny_cnn",
            "--methods", "hsdag", "--seeds", seeds, "--budget", "60", "--max-concurrent", "1",
            "--out", str(tmp_path), "--name", "sw"]


def interrupt_sweep(tmp_path: Path, profile: Path, signum: int, seeds: str = "0,1,2"):
    """Run a sweep of one trial at a time; send ``signum`` to it (its process only, as
    ``kill`` does) once a trial finished and the next one has checkpointed."""
    runs = tmp_path / "sw" / "runs"
    cmd = sweep_cmd(tmp_path, profile, seeds)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.time() + 400
        while time.time() < deadline and proc.poll() is None:
            done = {p.parent.name for p in runs.glob("*/summary.json")}
            going = {p.parent.parent.name for p in runs.glob("*/checkpoints/0*")} - done
            if done and going:
                break
            time.sleep(0.1)
        assert proc.poll() is None, "the sweep ended before it could be interrupted"
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=180)
    finally:
        reap(proc)
    return proc.returncode, out, err, done, cmd


@pytest.mark.slow
def test_a_sweep_stopped_by_sigint_keeps_its_finished_trials_and_says_how_to_resume(
        tmp_path, tiny_profile_file):
    code, out, err, done, cmd = interrupt_sweep(tmp_path, tiny_profile_file, signal.SIGINT)
    assert code == 130, err[-3000:]
    assert "resume with: python -m hsdag_ray.sweep" in err and "Traceback" not in err
    assert "failed" not in out + err
    runs = tmp_path / "sw" / "runs"
    finished = {p.parent.name: p.stat().st_mtime_ns for p in runs.glob("*/summary.json")}
    assert set(done) <= set(finished) and len(finished) < 3
    md = (tmp_path / "sw" / "results.md").read_text()
    assert "Partial results" in md and f"{3 - len(finished)} of 3 trials are missing" in md
    for name in {"tiny_cnn-hsdag-s0", "tiny_cnn-hsdag-s1", "tiny_cnn-hsdag-s2"} - set(finished):
        line = next(x for x in md.splitlines() if x.startswith(f"- {name}:"))
        assert "failed" not in line
    assert "not started" in md  # one trial at a time: the third never started
    # resumed: the finished trials are not run again, the stopped one continues
    r = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    after = {p.parent.name: p.stat().st_mtime_ns for p in runs.glob("*/summary.json")}
    assert len(after) == 3 and all(after[n] == t for n, t in finished.items())
    md = (tmp_path / "sw" / "results.md").read_text()
    assert "Partial" not in md
    for name in after:
        its = [x["iteration"] for x in rows(runs / name)]
        assert its == list(range(1, len(its) + 1)), (name, its)


# longer versions (pytest -m slow) -----------------------------------------------------------


@pytest.mark.slow
def test_a_run_killed_during_its_final_remeasurement_resumes_and_finishes(tmp_path,
                                                                         tiny_profile_file):
    """A simulator that stands for real devices (a measuring time per placement) times its
    best placements again at the end: SIGKILL the driver while it does, and at seven
    random moments before; resumed, the run's state is as consistent as ever."""
    rng = random.Random(1)
    run, log, budget = tmp_path / "final", tmp_path / "out.log", 100
    first = sim_run(tiny_profile_file, tmp_path, "final", budget) + ["--sim-delay-s", "0.01",
                                                                     "--remeasure-rounds", "3"]
    kills = [(f"at a random moment ({i})", lambda: after(rng.uniform(3.0, 40.0))) for i in range(7)]
    kills.append(("during the final re-measurement",
                  lambda: printed(log, b"again next to")))
    killed, seen = kill_and_resume(run, log, first, kills)
    assert "during the final re-measurement" in killed, killed
    check_consistent(run, log, seen, budget)
    assert json.loads((run / "summary.json").read_text()).get("remeasured")


@pytest.mark.slow
def test_a_sweep_killed_again_and_again_finishes_with_every_trial_consistent(tmp_path,
                                                                            tiny_profile_file):
    """SIGKILL a sweep (its trials and its Ray with it) at random moments, five times, and
    run it again each time: every trial ends with each iteration once, its summary counting
    what its store holds; a trial finished before a kill is never run again."""
    rng = random.Random(2)
    cmd = sweep_cmd(tmp_path, tiny_profile_file, "0,1,2")
    runs = tmp_path / "sw" / "runs"
    log = tmp_path / "sweep.log"
    finished: dict[str, int] = {}
    for _ in range(5):
        proc = start(cmd, log)
        kill_when(proc, runs, after(rng.uniform(15.0, 60.0)), timeout=400)
        for p in runs.glob("*/summary.json"):
            finished.setdefault(p.parent.name, p.stat().st_mtime_ns)
    proc = start(cmd, log)
    assert proc.wait(timeout=600) == 0, log.read_text()[-3000:]
    reap(proc)
    after_ = {p.parent.name: p.stat().st_mtime_ns for p in runs.glob("*/summary.json")}
    assert len(after_) == 3 and all(after_[n] == t for n, t in finished.items())
    for name in after_:
        s = json.loads((runs / name / "summary.json").read_text())
        store = json.loads((runs / name / "store.json").read_text())
        its = [x["iteration"] for x in rows(runs / name)]
        assert its == list(range(1, s["iterations"] + 1)), (name, its)
        assert s["measurements"] == len(store["log"])
    assert "Partial" not in (tmp_path / "sw" / "results.md").read_text()


@pytest.mark.slow
@pytest.mark.own_ray
def test_a_run_on_two_measuring_nodes_survives_a_node_killed_and_a_driver_killed(tmp_path):
    """Two measuring machines (raylets of a ray.cluster_utils.Cluster): one is killed hard
    mid-run, then the driver is SIGKILLed; resumed on the cluster, the run finishes with
    every iteration once and no measurement lost."""
    from ray.cluster_utils import Cluster

    from hsdag_ray.run.config import MEASURE_RESOURCE

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    nodes = [cluster.add_node(num_cpus=1, resources={MEASURE_RESOURCE: 1}) for _ in range(2)]
    cluster.wait_for_nodes()
    run, log, budget = tmp_path / "two", tmp_path / "out.log", 60
    base = [sys.executable, "-m", "hsdag_ray.train"]
    first = base + ["--model", "tiny_cnn", "--backend", "auto", "--devices", "CPU,CPU_F32",
                    "--env-runners", "2", "--episode-len", "10", "--repeats", "3", "--precision", "0",
                    "--remeasure-rounds", "2", "--wandb", "disabled", "--checkpoint-every", "1",
                    "--budget", str(budget), "--address", cluster.address, "--out", str(tmp_path),
                    "--name", "two"]
    resume = base + ["--resume", str(run), "--address", cluster.address]
    seen: set[str] = set()
    try:
        proc = start(first, log)
        t0 = time.time()
        while iteration(run) < 1 and proc.poll() is None and time.time() - t0 < 300:
            time.sleep(0.2)
        cluster.remove_node(nodes[0], allow_graceful=False)  # a measuring machine dies
        n = iteration(run)
        kill_when(proc, run, lambda r: iteration(r) > n, timeout=300)
        for s in stores(run):
            seen.update(keys(s))
        proc = start(resume, log)
        assert proc.wait(timeout=600) == 0, log.read_text()[-3000:]
    finally:
        cluster.shutdown()
    summary = json.loads((run / "summary.json").read_text())
    final = json.loads((run / "store.json").read_text())
    its = [r["iteration"] for r in rows(run)]
    assert its == list(range(1, summary["iterations"] + 1)), its
    assert summary["measurements"] == len(final["log"]) and seen <= keys(final)
