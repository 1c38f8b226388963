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

from typing import Any

__all__ = ["LOOPBACK", "start_local_ray"]

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
