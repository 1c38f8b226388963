"""A local Ray for one machine: reachable from this machine only.

``ray.init(address="local")`` alone starts a GCS, a raylet, an object manager and
workers that listen on every interface of the machine, so anyone on its network can
reach them. A run on one machine needs only loopback: :func:`start_local_ray` starts
a new local Ray whose servers all listen on ``127.0.0.1`` (``::1`` on a host without
IPv4), with no dashboard and no Ray client server. ``--address`` (a cluster started
with ``ray start``) is the way onto other machines.

Why it is not just ``ray.init(_node_ip_address="127.0.0.1")``: Ray (2.60) turns a
loopback node address into the machine's routable one
(``ray._private.services.resolve_ip_for_localhost``), and ``RAY_NODE_IP_ADDRESS`` is
not read. A node address of loopback is what Ray itself uses where clusters are off
(``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``, read once when Ray is imported), and its
servers then bind to it; :func:`start_local_ray` turns clusters off for the start of
its own Ray only, so the GCS, raylet and workers are given the loopback address.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

__all__ = ["LOOPBACK", "start_local_ray", "start_or_join"]

#: the node address asked for (Ray resolves it to ``::1`` on a host without IPv4)
LOOPBACK = "127.0.0.1"


def start_local_ray(**kwargs: Any):
    """``ray.init`` a new local Ray (even when another one runs on this machine) whose
    servers listen on loopback only, without dashboard or Ray client server; ``kwargs``
    are other ``ray.init`` settings (``num_cpus``, ``resources``, ``runtime_env``,
    ``log_to_driver``...). Returns what ``ray.init`` returns."""
    import ray
    from ray._private import ray_constants

    opts = {**kwargs, "address": "local", "include_dashboard": False, "_node_ip_address": LOOPBACK}
    clusters = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False  # loopback stays loopback while the node starts
    try:
        return ray.init(**opts)
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = clusters


def start_or_join(address: str = "", measures: bool = False,
                  env_vars: Optional[Mapping[str, str]] = None, **kwargs: Any) -> bool:
    """Ray for a command, as ``train``, ``sweep`` and ``pretrain`` all get it: nothing
    when this process already runs one (a caller's, or the test session's); else join the
    cluster at ``address`` (``ray start``), or start a local Ray on loopback
    (:func:`start_local_ray`) holding one measuring slot when this machine ``measures``
    on real devices (so measurements never overlap). ``env_vars`` go to every worker;
    ``kwargs`` are other ``ray.init`` settings. True when Ray was started or joined
    here, so the caller shuts it down."""
    import ray

    if ray.is_initialized():
        return False
    opts = {"log_to_driver": False, "configure_logging": False, **kwargs}
    if env_vars:
        opts["runtime_env"] = {"env_vars": dict(env_vars)}
    if address:
        ray.init(address=address, include_dashboard=False, **opts)
        return True
    if measures:
        from hsdag_ray.run.config import MEASURE_RESOURCE

        opts["resources"] = {MEASURE_RESOURCE: 1}
    start_local_ray(**opts)
    return True
