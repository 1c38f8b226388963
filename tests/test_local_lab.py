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

from hsdag_ray import results

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


@pytest.mark.slow  # several minutes: four Ray nodes, two runs, a sweep and a lost worker
@pytest.mark.skipif(sys.platform != "linux" or os.geteuid() != 0 or not shutil.which("ip"),
                    reason="needs Linux, root and iproute2 (network namespaces, sshd)")
def test_ray_up_on_the_lab_cluster():
    p = subprocess.run(["bash", "cluster/local_lab.sh", "check"], cwd=ROOT, capture_output=True,
                       text=True, timeout=1200)
    lines = p.stdout.strip().splitlines()
    assert p.returncode == 0 and lines and lines[-1].startswith("LAB CHECK PASSED"), \
        p.stdout[-3000:] + p.stderr[-5000:]
