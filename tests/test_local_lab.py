"""The lab cluster of ``cluster/local_lab.sh``: Ray's own launcher (``ray up``, ``ray exec``,
``ray down``) on hosts made on this machine as network namespaces with their own sshd,
run on a copy of ``cluster/config.yaml`` that differs only in addresses, user and key."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hsdag_ray.run import results

ROOT = Path(__file__).resolve().parents[1]
LAB = dict(head="10.77.0.10", workers="10.77.0.11,10.77.0.12,10.77.0.13", user="hsdaglab", key="/lab/key")


def _lab_config(tmp_path, source: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "cluster" / "lab_config.py"), str(source), str(tmp_path / "lab.yaml"),
         "--head", LAB["head"], "--workers", LAB["workers"], "--user", LAB["user"], "--key", LAB["key"]],
        capture_output=True, text=True)


def test_the_lab_copy_of_the_config_differs_only_in_addresses_user_and_key(tmp_path):
    p = _lab_config(tmp_path, ROOT / "cluster" / "config.yaml")
    assert p.returncode == 0, p.stderr
    original = yaml.safe_load((ROOT / "cluster" / "config.yaml").read_text())
    copy = yaml.safe_load((tmp_path / "lab.yaml").read_text())
    assert copy["provider"]["head_ip"] == LAB["head"]
    assert copy["provider"]["worker_ips"] == LAB["workers"].split(",")
    assert copy["auth"] == {"ssh_user": LAB["user"], "ssh_private_key": LAB["key"]}
    for key in set(original) - {"provider", "auth"}:
        assert copy[key] == original[key], key


def test_the_lab_copy_refuses_a_file_it_would_change_elsewhere(tmp_path):
    # a worker list of another length cannot be the lab's without changing more than addresses
    text = (ROOT / "cluster" / "config.yaml").read_text()
    other = tmp_path / "two.yaml"
    other.write_text(text.replace("    - 192.0.2.13\n", ""))
    assert other.read_text() != text
    p = _lab_config(tmp_path, other)
    assert p.returncode != 0 and "workers" in p.stderr
    assert not (tmp_path / "lab.yaml").exists()


def test_the_sweep_table_gives_the_measurements_per_machine():
    base = {"model": "tiny_cnn", "method": "random", "baselines": {"CPU_only": 2e-3},
            "method_best_latency_s": 1e-3, "measurements": 10, "failures": 0, "latencies_s": [1e-3]}
    runs = [results.rows_from_summary({**base, "seed": 0, "measured_by": {"10.0.0.2": 6, "10.0.0.3": 4}}),
            results.rows_from_summary({**base, "seed": 1, "measured_by": {"10.0.0.3": 7, "10.0.0.4": 3}})]
    text = results.markdown(runs)
    assert "Measurements per machine, all runs: 10.0.0.2 6, 10.0.0.3 11, 10.0.0.4 3." in text
    # a run without machines (measured in the driver) adds no such line
    assert "per machine" not in results.markdown([results.rows_from_summary({**base, "seed": 0})])


def _folders(python: str, *args: str) -> list[str]:
    p = subprocess.run([python, str(ROOT / "cluster" / "lab_python.py"), *args],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.split()


def test_the_hosts_are_given_the_folders_of_a_venv_they_would_not_see(tmp_path):
    """A venv under a hidden root (the hosts' own /tmp) is bound into them whole, its base
    interpreter too when that is hidden, and pip's site folder gets a layer of its own
    (a venv without a user site folder cannot fall back to ``pip install --user``)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    hidden = _folders(python, "--hidden", str(tmp_path))
    assert hidden == [str(venv)]  # its bin, lib and site folder are inside it: bound once
    base = Path(sys.base_prefix).resolve()
    assert str(base) in _folders(python, "--hidden", str(base.parent))
    layered = _folders(python, "--writable")
    assert len(layered) == 1 and Path(layered[0]).name == "site-packages" and \
        Path(layered[0]).is_relative_to(venv)
    shared = tmp_path / "shared"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(shared)],
                   check=True, timeout=120)
    assert _folders(str(shared / "bin" / "python"), "--writable") == []  # pip installs for the user
    # nothing is hidden when the interpreter lies elsewhere; a named folder counts too
    assert _folders(python, "--hidden", "/nonexistent") == []
    assert _folders(python, "--hidden", str(ROOT.parent), str(ROOT)) == [str(ROOT.resolve())]


def test_the_folders_bound_are_the_outermost_under_a_hidden_root():
    from cluster.lab_python import hidden_folders

    paths = ["/tmp/v", "/tmp/v/lib/site-packages", "/root/.pyenv/versions/3.11", "/usr/lib/python3",
             "/tmp", "/tmpx/a", "/root/.pyenv/versions/3.11/lib"]
    assert hidden_folders(paths, ["/tmp", "/root"]) == ["/root/.pyenv/versions/3.11", "/tmp/v"]


@pytest.mark.slow  # several minutes: four Ray nodes, two runs, a sweep and a lost worker
@pytest.mark.skipif(sys.platform != "linux" or os.geteuid() != 0 or not shutil.which("ip"),
                    reason="needs Linux, root and iproute2 (network namespaces, sshd)")
def test_ray_up_on_the_lab_cluster():
    p = subprocess.run(["bash", "cluster/local_lab.sh", "check"], cwd=ROOT, capture_output=True,
                       text=True, timeout=1200)
    lines = p.stdout.strip().splitlines()
    assert p.returncode == 0 and lines and lines[-1].startswith("LAB CHECK PASSED"), \
        p.stdout[-3000:] + p.stderr[-5000:]
