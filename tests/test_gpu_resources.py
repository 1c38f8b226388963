"""The GPUs of measuring actors in a sweep's trials and in a run's count of measuring machines.

A measuring actor of a real backend on CUDA devices asks Ray for the GPUs it measures on
(:func:`envs.gpus.measuring_gpus`). In a sweep every actor of a trial is placed in the
trial's placement group, so each measuring bundle must hold those GPUs too
(:func:`hsdag_ray.run.sweep_trials._resources`); a run counts as measuring machines only those that
have the GPUs in Ray (:func:`hsdag_ray.run.training._measuring_runners`), since an EnvRunner
placed on a machine that names ``cuda:0`` without holding a GPU in Ray would wait forever.
Ray lets a local node declare GPUs it does not have (``num_gpus=1``), so these run on a
machine without one.
"""
from pathlib import Path

import pytest
import ray

from hsdag_ray.cli import UsageError
from hsdag_ray.run.config import MEASURE_RESOURCE
from hsdag_ray.run.nodes import measuring_slots

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process

CUDA_SET = "devices_cpu+cuda:0"


def _bundles(tmp_path: Path, **train):
    """The bundles of the placement group of the sweep's trial with ``train`` settings."""
    from hsdag_ray.run.sweep_trials import _resources
    from hsdag_ray.run.sweeping import SweepConfig, trials

    sc = SweepConfig(models=["tiny_cnn"], methods=["hsdag"], seeds=[0], budget=10, train=train)
    pgf = _resources(sc, sc.trial_config(trials(sc)[0], tmp_path))
    import ray

    # the trial's driver is pinned to the sweep's machine (its run folder is read there):
    # checked here, then left out of the bundles the tests compare
    here = f"node:{ray.util.get_node_ip_address()}"
    first, *rest = pgf.bundles
    assert first.pop(here) == 0.001, pgf.bundles
    return [first, *rest]


def _start(num_gpus: int) -> None:
    from hsdag_ray.run.local_ray import start_local_ray

    start_local_ray(num_cpus=2, num_gpus=num_gpus, resources={MEASURE_RESOURCE: 1, CUDA_SET: 1},
                    log_to_driver=False, configure_logging=False)


def _run_cfg(devices, env_runners=2):
    from hsdag_ray.run.config import TrainConfig

    return TrainConfig.of(model="tiny_cnn", backend="torch", devices=devices, env_runners=env_runners,
                       wandb="disabled")


def test_a_torch_trial_on_a_cuda_device_holds_its_gpu_in_every_measuring_bundle(tmp_path):
    # the session's Ray: one measuring slot, no device sets named (a uniform cluster)
    slot = {MEASURE_RESOURCE: 1}
    assert _bundles(tmp_path, backend="torch", devices=["cpu", "cuda:0"], env_runners=2) == \
        [{"CPU": 1}, {**slot, "GPU": 1}, {**slot, "GPU": 1}]
    # a memory cap is a setting of cuda:0; cuda:1 is visible to an actor only with two GPUs
    assert _bundles(tmp_path, backend="torch", devices=["cpu", "cuda:0:mem=2GB"], env_runners=1) \
        == [{"CPU": 1}, {**slot, "GPU": 1}]
    assert _bundles(tmp_path, backend="torch", devices=["cpu", "cuda:1"], env_runners=1) == \
        [{"CPU": 1}, {**slot, "GPU": 2}]
    # no EnvRunner: the one measuring bundle is the measuring service's, with its GPU
    assert _bundles(tmp_path, backend="torch", devices=["cpu", "cuda:0"], env_runners=0) == \
        [{"CPU": 1}, {**slot, "GPU": 1}]


def test_a_trial_without_cuda_devices_holds_no_gpu(tmp_path):
    slot = {MEASURE_RESOURCE: 1}
    assert _bundles(tmp_path, backend="auto", devices=["CPU", "CPU_F32"], env_runners=2) == \
        [{"CPU": 1}, slot, slot]
    assert _bundles(tmp_path, backend="torch", devices=["cpu", "cpu:bf16"], env_runners=1) == \
        [{"CPU": 1}, slot]
    # a simulator computes, even with a measuring delay and a profile of CUDA devices
    assert _bundles(tmp_path, backend="simulator", devices=["cpu", "cuda:0"], sim_delay_s=0.01,
                    env_runners=1) == [{"CPU": 1}, slot]
    assert _bundles(tmp_path, backend="simulator", env_runners=2) == [{"CPU": 1}] * 3


@pytest.mark.slow  # a Ray of its own; CI runs the test of a machine with the GPU
@pytest.mark.own_ray
def test_a_machine_naming_cuda_without_a_gpu_in_ray_is_not_a_measuring_machine():
    from hsdag_ray.run.training import _measuring_runners

    _start(num_gpus=0)
    try:
        want = {MEASURE_RESOURCE: 1, CUDA_SET: 1}
        assert measuring_slots(want) == 1
        assert measuring_slots({**want, "GPU": 1}) == 0
        said = []
        with pytest.raises(UsageError) as e:
            _measuring_runners(_run_cfg(["cpu", "cuda:0"]), True, ["cpu", "cuda:0"], said.append)
        assert "no measuring machine with the devices cpu, cuda:0 has the 1 GPU(s)" in str(e.value)
        assert "--num-gpus=1" in str(e.value)
    finally:
        ray.shutdown()


@pytest.mark.own_ray
def test_a_machine_with_the_gpu_in_ray_measures_and_a_trial_bundle_places_its_runner(tmp_path):
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from hsdag_ray.run.training import _measuring_runners

    _start(num_gpus=1)  # declared, not necessarily there
    try:
        want = {MEASURE_RESOURCE: 1, CUDA_SET: 1}
        assert measuring_slots({**want, "GPU": 1}) == 1
        assert measuring_slots({**want, "GPU": 2}) == 0  # cuda:1 needs two
        said = []
        # one EnvRunner (one machine); what it asks for besides its GPU (algos adds num_gpus)
        assert _measuring_runners(_run_cfg(["cpu", "cuda:0"]), True, ["cpu", "cuda:0"],
                                  said.append) == (1, want)
        # the trial's bundles name the machine's device set and hold its GPU ...
        bundles = _bundles(tmp_path, backend="torch", devices=["cpu", "cuda:0"], env_runners=1)
        assert bundles == [{"CPU": 1}, {**want, "GPU": 1}]

        @ray.remote(num_cpus=0, num_gpus=1, resources=want)
        class Runner:  # what RLlib builds: a measuring EnvRunner holding its GPU
            def gpus(self):
                return ray.get_gpu_ids()

        @ray.remote(num_cpus=1)
        def trial():  # a sweep's trial: RLlib builds the EnvRunner in the trial's group
            try:
                runner = Runner.remote()
            except ValueError as e:  # Ray refuses an actor no bundle of the group can hold
                return str(e)
            return ray.get(runner.gpus.remote(), timeout=60)

        def in_trial(group_bundles):
            pg = placement_group(group_bundles, strategy="SPREAD")
            try:
                assert pg.wait(timeout_seconds=30)
                return ray.get(trial.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
                    pg, placement_group_bundle_index=0,
                    placement_group_capture_child_tasks=True)).remote(), timeout=90)
            finally:
                remove_placement_group(pg)

        # ... so the runner starts there, holding GPU 0
        assert in_trial(bundles) == [0]
        # the bundles as they were, without the GPU: Ray refuses the runner in the trial
        assert "cannot fit into any bundles" in in_trial([{"CPU": 1}, want])
    finally:
        ray.shutdown()
