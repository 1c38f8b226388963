import pytest
"""Secrets (the W&B API key, Ray's auth token) given in the environment, as the
cluster's start commands give them, never reach a run's or a sweep's folder."""
import os
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _files_holding(folder: Path, needles: list[bytes]) -> list[str]:
    found = []
    for f in folder.rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            found += [f"{f.relative_to(folder)}" for n in needles if n in data]
    return found


@pytest.mark.slow
def test_no_secret_in_any_output_file_of_a_sweep_and_its_run(tmp_path):
    key, token = secrets.token_hex(20), secrets.token_hex(16)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "offline", "WANDB_API_KEY": key,
           "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    p = subprocess.run([sys.executable, "-m", "hsdag_ray.sweep", "--models", "tiny_cnn", "--methods",
                        "random", "--seeds", "0", "--budget", "10", "--wandb", "offline",
                        "--out", str(tmp_path), "--name", "s"],
                       env=env, cwd=ROOT, capture_output=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    folder = tmp_path / "s"
    run = folder / "runs" / "tiny_cnn-random-s0"
    assert (run / "summary.json").is_file() and (folder / "results.csv").is_file()
    assert list(run.rglob("wandb/offline-run-*")), "W&B wrote its offline run"
    assert _files_holding(folder, [key.encode(), token.encode()]) == []
    assert key.encode() not in p.stdout + p.stderr and token.encode() not in p.stdout + p.stderr
