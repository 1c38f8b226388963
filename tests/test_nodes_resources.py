"""Device sets as Ray resources, and the GPUs a measuring actor asks for.

A measuring machine advertises its devices as one custom resource
(:func:`hsdag_ray.run.nodes.devices_resource`); PyTorch device names such as
``cuda:0`` keep their ``:`` (Ray 2.60 accepts it; a local Ray started here with
such a resource schedules on it). A measuring actor of a real backend on CUDA
devices asks Ray for the GPUs it measures on (:func:`hsdag_ray.run.nodes.gpus_needed`).
"""
import pytest
import ray

from hsdag_ray.cli import UsageError
from hsdag_ray.run.config import MEASURE_RESOURCE
from hsdag_ray.run.nodes import (device_name, devices_resource, gpus_needed, measuring_gpus,
                             measuring_resources, measuring_slots)

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process


@pytest.mark.parametrize("spec,name", [
    ("CPU", "CPU"), ("GPU", "GPU"), ("GPU.1", "GPU.1"), ("CPU_F32", "CPU_F32"),
    ("CPU:precision=f32", "CPU"), ("CPU_FAST=CPU:precision=bf16:threads=2", "CPU_FAST"),
    ("cpu", "cpu"), ("cpu:bf16", "cpu:bf16"), ("cuda:0", "cuda:0"), ("cuda", "cuda:0"),
    ("cuda:0:mem=2GB", "cuda:0"), ("cuda:1:bf16:mem=300MB", "cuda:1:bf16"),
])
def test_a_device_is_named_without_its_settings(spec, name):
    assert device_name(spec) == name


def test_a_device_set_is_one_resource_named_as_the_user_types_the_devices():
    # OpenVINO names as before
    assert devices_resource(["CPU", "GPU"]) == devices_resource(["GPU", "CPU"]) == "devices_CPU+GPU"
    assert devices_resource(["CPU", "CPU_F32"]) == "devices_CPU+CPU_F32"
    # PyTorch names keep their ":"; a memory cap is a setting, not another device
    assert devices_resource(["cpu", "cuda:0"]) == "devices_cpu+cuda:0"
    assert devices_resource(["cuda:0:mem=2GB", "cpu"]) == "devices_cpu+cuda:0"
    assert devices_resource(["cpu", "cpu:bf16"]) == "devices_cpu+cpu:bf16"
    assert devices_resource(["cuda:1", "cuda:0", "cpu"]) == "devices_cpu+cuda:0+cuda:1"
    # never a character Ray refuses in a resource name
    assert "," not in devices_resource(["cpu", "cuda:0", "CPU_FAST=CPU:precision=bf16"])


@pytest.mark.parametrize("devices,gpus", [
    (["CPU", "GPU"], 0), (["CPU", "CPU_F32"], 0), (["cpu", "cpu:bf16"], 0), ([], 0),
    (["cpu", "cuda:0"], 1), (["cpu", "cuda"], 1), (["cpu", "cuda:0:mem=2GB"], 1),
    (["cuda:0", "cuda:0:bf16"], 1),
    # Ray shows an actor its GPUs numbered from 0: cuda:1 exists only with two of them
    (["cuda:0", "cuda:1"], 2), (["cpu", "cuda:1"], 2), (["cpu", "cuda:3:mem=1GB"], 4),
])
def test_the_gpus_a_measuring_actor_needs(devices, gpus):
    assert gpus_needed(devices) == gpus


def test_only_a_real_backend_asks_for_gpus():
    assert measuring_gpus({"backend": "torch", "devices": ["cpu", "cuda:0"]}) == 1
    assert measuring_gpus({"backend": "torch", "devices": ["cpu", "cpu:bf16"]}) == 0
    assert measuring_gpus({"backend": "auto", "devices": ["CPU", "CPU_F32"]}) == 0
    # a simulator computes, also on a profile of CUDA devices and with a measuring delay
    assert measuring_gpus({"backend": "simulator", "devices": ["cpu", "cuda:0"],
                           "sim_delay_s": 0.02}) == 0


def _runner_config(backend, devices, real, env_runners=2):
    from hsdag_ray.run.algos import algo_config
    from hsdag_ray.run.config import TrainConfig
    from policies.registry import get

    cfg = TrainConfig.of(model="tiny_cnn", backend=backend, devices=devices, env_runners=env_runners,
                      wandb="disabled")
    env_cfg = {"backend": backend, "devices": devices}
    return algo_config(cfg, get("hsdag"), env_cfg, real, steps_per_episode=cfg.learning.episode_len,
                       resources={MEASURE_RESOURCE: 1, devices_resource(devices): 1})


def test_a_measuring_env_runner_asks_for_the_gpu_it_measures_on():
    ac = _runner_config("torch", ["cpu", "cuda:0"], real=True)
    assert ac.num_gpus_per_env_runner == 1
    assert ac.num_cpus_per_env_runner == 0
    assert ac.custom_resources_per_env_runner == {MEASURE_RESOURCE: 1, "devices_cpu+cuda:0": 1}
    assert _runner_config("torch", ["cuda:0", "cuda:1"], real=True).num_gpus_per_env_runner == 2
    # OpenVINO devices, the simulator (even with a measuring delay), no remote EnvRunner: none
    assert _runner_config("auto", ["CPU", "CPU_F32"], real=True).num_gpus_per_env_runner == 0
    assert _runner_config("simulator", ["cpu", "cuda:0"], real=True).num_gpus_per_env_runner == 0
    assert _runner_config("simulator", ["cpu", "cuda:0"], real=False).num_gpus_per_env_runner == 0
    assert _runner_config("torch", ["cpu", "cuda:0"], real=True,
                          env_runners=0).num_gpus_per_env_runner == 0


@pytest.mark.slow  # a Ray of its own; CI runs the GPU-resources test on a CUDA device set
@pytest.mark.own_ray
def test_a_machine_advertising_a_cuda_device_set_is_found_by_its_devices():
    from hsdag_ray.run.local_ray import start_local_ray

    cuda_set = "devices_cpu+cuda:0"
    start_local_ray(num_cpus=1, resources={MEASURE_RESOURCE: 1, cuda_set: 1},
                    log_to_driver=False, configure_logging=False)
    try:
        assert ray.cluster_resources()[cuda_set] == 1
        want = {MEASURE_RESOURCE: 1, cuda_set: 1}
        assert measuring_resources(["cpu", "cuda:0"]) == want
        assert measuring_resources(["cuda:0:mem=2GB", "cpu"]) == want  # as typed, capped
        assert measuring_slots(want) == 1

        @ray.remote(num_cpus=0, resources=want)
        def measured_here() -> bool:
            return True

        assert ray.get(measured_here.remote(), timeout=60)  # Ray schedules on the name
        # a device set no machine has: the devices as the user types them, in one sentence
        with pytest.raises(UsageError) as e:
            measuring_resources(["cpu", "cuda:1"])
        msg = str(e.value)
        assert "no measuring machine of the cluster has the devices cpu,cuda:1" in msg
        assert "(the machines have cpu,cuda:0)" in msg and "'devices_cpu+cuda:1'" in msg
    finally:
        ray.shutdown()
