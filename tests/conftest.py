import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
BENCHMARKS = SHARED / "benchmarks" / "dnn-partitioning"

# W&B never reaches the network from the tests
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")


#: the lock files by which a test marked ``alone`` runs with no test of the other xdist
#: worker beside it (:func:`pytest_runtest_protocol`)
_GATE, _RUNNING = (Path(os.environ.get("TMPDIR", "/tmp")) / f"hsdag-ray-tests-{n}.lock"
                   for n in ("gate", "running"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A test marked ``alone`` (one that compares real timings, which the other worker's
    load would skew) holds the running lock exclusively through its set-up, call and
    tear-down; every other test holds it shared, its module's fixtures included. The gate
    gives the exclusive holder priority: it is held while the exclusive lock is awaited,
    so the other worker starts no new test meanwhile. Without xdist workers the locks
    are never contended."""
    import fcntl

    alone = item.get_closest_marker("alone") is not None
    with open(_GATE, "a") as gate, open(_RUNNING, "a") as running:
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(running, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(running, fcntl.LOCK_UN)
            fcntl.flock(gate, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def _session_ray(request):
    """One local Ray (loopback only, a measuring slot) shared by the tests marked ``ray``
    (those that use Ray in this process), started for the first of them: ``train``,
    ``sweep`` and ``pretrain`` join a running Ray rather than start and stop their own,
    which would cost each in-process run about 8 s here. Other tests run without Ray,
    so a test of the code alone needs no Ray at all. A test marked ``own_ray`` finds no
    Ray running and leaves none behind. Under the README's ``-n 2`` each worker process
    has its own session Ray (a local Ray on loopback, independent of the other's), and
    ``--dist loadfile`` keeps a module's tests, and its module fixtures, in one worker."""
    if request.node.get_closest_marker("own_ray"):
        import ray

        if ray.is_initialized():
            ray.shutdown()
        yield
        if ray.is_initialized():
            ray.shutdown()
        return
    if request.node.get_closest_marker("ray"):
        import ray

        if not ray.is_initialized():
            from hsdag_ray.run.config import MEASURE_RESOURCE
            from hsdag_ray.run.local_ray import start_local_ray

            start_local_ray(include_dashboard=False, log_to_driver=False, configure_logging=False,
                            resources={MEASURE_RESOURCE: 1},
                            runtime_env={"env_vars": {"OMP_NUM_THREADS": "1",
                                                      "WANDB_MODE": os.environ["WANDB_MODE"]}})
    yield


@pytest.fixture(scope="session")
def benchmarks_dir() -> Path:
    if not BENCHMARKS.is_dir():
        pytest.skip("the dnn-partitioning benchmark folder (../shared/benchmarks) is not beside the project")
    return BENCHMARKS


def modeled_profile(model: str, devices=("CPU_MODEL", "GPU_MODEL"), boundary_s: float = 5e-4):
    """A profile of ``model`` on modeled devices only: the same costs on every machine,
    unlike a recorded one, so learning tests do not depend on the host or its load."""
    from hsdag_core.coarsening import build_graph
    from hsdag_core.device_profile import Profile, add_modeled_device

    _, fine, _, _ = build_graph(model, "none")
    prof = Profile(model=model, devices={}, op_time_s={})
    for name in devices:
        add_modeled_device(prof, fine, name)
    prof.boundary_s = boundary_s
    return prof


def small_dnnpart(path: Path, max_size: float = 100.0) -> Path:
    """A four-node diamond in the dnn-partitioning input format (two accelerators of
    ``max_size`` bytes, one CPU; node i: CPU 10(i+1), accelerator 1+i, size 10), written to
    ``path``."""
    import json

    doc = {"maxSizePerFPGA": max_size, "maxFPGAs": 2, "maxCPUs": 1,
           "nodes": [{"id": i, "supportedOnFpga": 1, "cpuLatency": 10.0 * (i + 1),
                      "fpgaLatency": 1.0 + i, "isBackwardNode": 0, "size": 10.0}
                     for i in range(4)],
           "edges": [{"sourceId": 0, "destId": 1, "cost": 0.5},
                     {"sourceId": 0, "destId": 2, "cost": 0.5},
                     {"sourceId": 1, "destId": 3, "cost": 0.25},
                     {"sourceId": 2, "destId": 3, "cost": 0.25}]}
    path.write_text(json.dumps(doc))
    return path


#: a CPU, two accelerators that differ only in memory and an NPU-like one
FOUR_DEVICES = ("CPU_MODEL", "GPU_SMALLMEM", "GPU_TINYMEM", "NPU_MODEL")


@pytest.fixture(scope="session")
def four_device_profile(tmp_path_factory) -> Path:
    """tiny_cnn on :data:`FOUR_DEVICES` (memory limits on three of them): every method's
    runs on more than two devices."""
    path = tmp_path_factory.mktemp("four") / "tiny_cnn.json"
    modeled_profile("tiny_cnn", FOUR_DEVICES).save(path)
    return path


@pytest.fixture(scope="session")
def tiny_profile_file(tmp_path_factory) -> Path:
    """tiny_cnn on a modeled CPU and accelerator with a 0.5 ms stage boundary (splitting is
    not free): the profile the single-graph learning tests of every method train on."""
    path = tmp_path_factory.mktemp("tiny-profile") / "tiny_cnn.json"
    modeled_profile("tiny_cnn").save(path)
    return path


@pytest.fixture
def tiny_recording(tmp_path):
    """``make(name, seed)``: a tiny_cnn profile as one recording of a machine might give
    it (a modeled CPU and accelerator, every op's time off by its own seeded factor
    exp(N(0, 1)), a 10 us stage boundary), written to ``tmp_path/name.json``; two seeds
    are two recordings that disagree op by op."""
    import numpy as np
    from hsdag_core.coarsening import build_graph
    from hsdag_core.device_profile import MODELED_DEVICES, Profile, add_modeled_device

    _, fine, _, _ = build_graph("tiny_cnn", "none")

    def make(name: str, seed: int) -> Path:
        prof = Profile("tiny_cnn", {}, {})
        add_modeled_device(prof, fine, "CPU_MODEL")
        add_modeled_device(prof, fine, "GPU_X", MODELED_DEVICES["GPU_MODEL"])
        rng = np.random.default_rng(seed)
        for dev in prof.op_time_s:
            prof.op_time_s[dev] = {op: t * float(np.exp(rng.standard_normal()))
                                   for op, t in prof.op_time_s[dev].items()}
        prof.boundary_s = 1e-5
        path = tmp_path / f"{name}.json"
        prof.save(path)
        return path

    return make
