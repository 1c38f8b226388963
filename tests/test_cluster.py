"""Several measuring machines, simulated with several raylets on this one."""
import ray
import pytest
from ray.cluster_utils import Cluster

from hsdag_ray.run.config import MEASURE_RESOURCE, TrainConfig
from hsdag_ray.run.training import train

pytestmark = pytest.mark.own_ray  # Ray clusters of their own (or none at all)


@pytest.fixture
def lab_cluster():
    """A head without a measuring slot and two 'machines' with one slot each."""
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    for _ in range(2):
        cluster.add_node(num_cpus=1, resources={MEASURE_RESOURCE: 1})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def test_one_measuring_env_runner_per_machine(lab_cluster, tmp_path):
    head = ray.get_runtime_context().get_node_id()
    placed = []

    def where(algo, row):
        if not placed:
            placed.extend(algo.env_runner_group.foreach_env_runner(
                lambda r: ray.get_runtime_context().get_node_id(), local_env_runner=False))

    # three EnvRunners asked for, two machines measure: one runner per machine
    cfg = TrainConfig.of(model="tiny_cnn", backend="auto", devices=["CPU", "CPU_F32"], budget=20,
                      episode_len=10, env_runners=3, repeats=3, precision=0, wandb="disabled", out=str(tmp_path),
                      name="lab")
    s = train(cfg, quiet=True, on_iteration=where)
    assert len(placed) == 2 and len(set(placed)) == 2 and head not in placed
    assert s["measurements"] >= 3 and s["failures"] == 0


@pytest.mark.slow  # a second cluster run; test_one_measuring_env_runner_per_machine runs one in CI
def test_baselines_and_the_final_remeasurement_run_on_a_measuring_machine(tmp_path):
    """A head that measures nothing and one measuring machine: every timing of the
    run, the baselines and the re-measurement of the result included, is made on
    the measuring machine, never on the head where the driver runs."""
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    cluster.add_node(num_cpus=1, resources={MEASURE_RESOURCE: 1})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    try:
        head = ray.get_runtime_context().get_node_id()
        [worker] = [n["NodeID"] for n in ray.nodes() if n["Resources"].get(MEASURE_RESOURCE)]
        cfg = TrainConfig.of(model="tiny_cnn", backend="auto", devices=["CPU", "CPU_F32"], budget=20,
                          episode_len=10, env_runners=1, repeats=3, precision=0, remeasure_rounds=2,
                          wandb="disabled", out=str(tmp_path), name="where")
        s = train(cfg, quiet=True)
        assert worker != head
        assert s["measured_on"] == worker and s["remeasured"]["node"] == worker
        import json

        state = json.loads((tmp_path / "where" / "state.json").read_text())
        assert state["baselines"]["measured_on"] == worker
        store = json.loads((tmp_path / "where" / "store.json").read_text())
        assert store["log"] and {e["node"] for e in store["log"]} == {worker}
    finally:
        ray.shutdown()
        cluster.shutdown()
