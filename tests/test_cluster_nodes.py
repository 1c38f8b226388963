"""Measuring machines that leave mid-run, and machines with different device sets.

Several raylets on this one machine stand for the lab's machines; the
simulator with a fixed measuring time (``sim_delay_s``) stands for real
devices, so the run pins its measuring actors as a real one does.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import ray
from ray.cluster_utils import Cluster

from hsdag_ray.cli import UsageError
from hsdag_ray.run.nodes import devices_resource
from hsdag_ray.run.config import MEASURE_RESOURCE, TrainConfig
from hsdag_ray.run.training import train

pytestmark = pytest.mark.own_ray  # Ray clusters of their own (or none at all)

ROOT = Path(__file__).resolve().parents[1]
SIM = dict(model="tiny_cnn", backend="simulator", sim_delay_s=0.02, episode_len=10,
           wandb="disabled", remeasure_rounds=1)


@pytest.fixture
def cluster():
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    yield c
    ray.shutdown()
    c.shutdown()


def _runs(tmp_path, name):
    d = tmp_path / name
    rows = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
    return rows, json.loads((d / "store.json").read_text())


@pytest.mark.slow
def test_training_goes_on_when_a_measuring_machine_dies(cluster, tmp_path):
    nodes = [cluster.add_node(num_cpus=1, resources={MEASURE_RESOURCE: 1}) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    victim = nodes[1]
    killed_after: list[int] = []

    def kill(algo, row):
        if row["iteration"] == 2:
            cluster.remove_node(victim)
            killed_after.append(row["measurements"])

    cfg = TrainConfig.of(**SIM, budget=60, episodes_per_iteration=2, env_runners=2,
                      checkpoint_every=1, out=str(tmp_path), name="dies")
    s = train(cfg, quiet=True, on_iteration=kill)
    rows, store = _runs(tmp_path, "dies")
    assert killed_after, "the run ended before the machine was removed"
    # every iteration is there, in order, and the run reached its budget without the machine
    assert [r["iteration"] for r in rows] == list(range(1, len(rows) + 1)) == \
        list(range(1, s["iterations"] + 1))
    assert s["placements"] >= 60 and s["placements"] == rows[-1]["placements"]
    assert [r["placements"] for r in rows] == sorted(r["placements"] for r in rows)
    log_nodes = [e["node"] for e in store["log"]]
    assert victim.node_id in log_nodes[: killed_after[0]]  # both machines measured before
    assert victim.node_id not in log_nodes[killed_after[0]:]  # only the survivor after
    assert len(log_nodes) > killed_after[0]


@pytest.mark.slow  # a cluster run; CI keeps one, and the one that loses a machine
def test_a_run_measures_only_on_machines_with_its_devices(cluster, tmp_path):
    mine = ["CPU", "GPU_SMALLMEM"]
    other = cluster.add_node(num_cpus=1, resources={MEASURE_RESOURCE: 1,
                                                    devices_resource(["CPU", "GPU"]): 1})
    good = cluster.add_node(num_cpus=1, resources={MEASURE_RESOURCE: 1,
                                                   devices_resource(reversed(mine)): 1})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    cfg = TrainConfig.of(**SIM, devices=mine, budget=30, env_runners=2, out=str(tmp_path), name="set")
    s = train(cfg, quiet=True)
    _, store = _runs(tmp_path, "set")
    assert {e["node"] for e in store["log"]} == {good.node_id} != {other.node_id}
    assert s["measured_on"] == good.node_id
    # no machine has these devices: one sentence, before anything runs
    with pytest.raises(UsageError, match="no measuring machine of the cluster has the devices"):
        train(TrainConfig.of(**SIM, devices=["CPU", "GPU_MODEL"], budget=10, out=str(tmp_path),
                          name="none"), quiet=True)


@pytest.mark.slow
def test_no_machine_with_the_devices_exits_2_in_one_sentence(cluster, tmp_path):
    cluster.add_node(num_cpus=1, resources={MEASURE_RESOURCE: 1, devices_resource(["CPU", "GPU"]): 1})
    cluster.wait_for_nodes()
    p = subprocess.run([sys.executable, "-m", "hsdag_ray.train", "--address", cluster.address,
                        "--model", "tiny_cnn", "--backend", "simulator", "--sim-delay-s", "0.01",
                        "--devices", "CPU,GPU_SMALLMEM", "--budget", "10", "--wandb", "disabled",
                        "--out", str(tmp_path)],
                       capture_output=True, text=True, cwd=ROOT, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 2, p.stderr[-2000:]
    # (lines before it are the run's progress notes, e.g. about a cached profile)
    err = [line for line in p.stderr.strip().splitlines() if "error:" in line]
    assert "Traceback" not in p.stderr and len(err) == 1
    assert "devices CPU,GPU_SMALLMEM" in err[0] and "(the machines have CPU,GPU)" in err[0]
