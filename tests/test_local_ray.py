"""A local run's Ray listens on loopback only: no GCS, raylet, object manager or worker
reachable from the machine's network, no dashboard, no Ray client server."""
import ipaddress
import os

import psutil
import pytest

pytestmark = pytest.mark.own_ray  # Ray clusters of their own (or none at all)


def _listening(pids: set[int]) -> list[tuple[str, str, int]]:
    """(process name, address, port) of every listening TCP socket of ``pids``."""
    names = {}
    for pid in pids:
        try:
            names[pid] = psutil.Process(pid).name()
        except psutil.NoSuchProcess:
            pass
    return [(names[c.pid], c.laddr.ip, c.laddr.port) for c in psutil.net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN and c.pid in names]


def _is_loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%")[0])
    if getattr(addr, "ipv4_mapped", None) is not None:  # ::ffff:127.0.0.1
        addr = addr.ipv4_mapped
    return addr.is_loopback


def test_a_local_run_starts_ray_on_loopback_only():
    import ray

    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.training import _start_ray

    os.environ.setdefault("WANDB_MODE", "offline")
    assert not ray.is_initialized(), "another test left Ray running"
    assert _start_ray(TrainConfig.of(model="tiny_cnn", torch_threads=1), real=False)
    try:
        @ray.remote(num_cpus=0)
        def pid():
            return os.getpid()

        @ray.remote(num_cpus=0)
        class Actor:
            def pid(self):
                return os.getpid()

        actor = Actor.remote()
        workers = set(ray.get([pid.remote(), actor.pid.remote()]))
        ray.get(ray.put(b"x" * (1 << 20)))  # the object store in use too
        me = psutil.Process()
        ray_pids = {me.pid} | {p.pid for p in me.children(recursive=True)}
        assert workers <= ray_pids  # the workers were started by this Ray
        names = {psutil.Process(p).name() for p in ray_pids if psutil.pid_exists(p)}
        assert any("gcs_server" in n for n in names) and any("raylet" in n for n in names), names
        sockets = _listening(ray_pids)
        assert any("gcs_server" in n for n, _, _ in sockets), sockets
        assert any("raylet" in n for n, _, _ in sockets), sockets
        exposed = [s for s in sockets if not _is_loopback(s[1])]
        assert not exposed, f"listening beyond loopback: {exposed}"
        assert ray.util.get_node_ip_address() in ("127.0.0.1", "::1")
        # no dashboard, no Ray client server
        assert not any("dashboard" in n or "ray_client_server" in n for n in names), names
        assert not ray.get_runtime_context().gcs_address.startswith(("0.0.0.0", "[::]"))
    finally:
        ray.shutdown()


def test_the_loopback_start_leaves_ray_cluster_setting_as_it_was():
    """Turning clusters off is for the start of its own Ray only: a failed start (here a
    bad setting) leaves Ray's cluster setting as it was."""
    import ray
    from ray._private import ray_constants

    from hsdag_ray.run.local_ray import start_local_ray

    before = ray_constants.ENABLE_RAY_CLUSTER
    with pytest.raises(Exception):
        start_local_ray(num_cpus=-1)
    assert ray_constants.ENABLE_RAY_CLUSTER == before
    if ray.is_initialized():
        ray.shutdown()
