"""Real PyTorch measurement (the ``torch`` backend), one module per responsibility.

``devices`` (device specs: ``cpu``, ``cpu:bf16``, ``cuda:0:mem=2GB``), ``stages`` (a
placement cut into stages with ``torch.fx`` and run on its devices), ``backend``
(:class:`~envs.pytorch.backend.TorchBackend`), ``profile_ops`` (per-node times),
``pipelined`` (pipelined inference, the throughput objective), ``accelerate_map``
(Hugging Face Accelerate's device map as a baseline), ``saved``
(a placed program saved and loaded), ``apply`` (a placement applied) and ``source`` (the
graph source the backend registers: :data:`envs.pytorch.source.SOURCE`). Nothing here imports OpenVINO or Ray.
"""
from __future__ import annotations

__all__ = ["torch_backend"]


def torch_backend(graph, *, model=None, devices=(), timing=None, objective: str = "sequential",
                  **_):
    """The torch backend for ``graph`` of the program ``model`` (registered as ``torch``)."""
    from envs.base import TimingConfig
    from envs.pytorch.backend import TorchBackend
    from hsdag_core.compgraph import GraphError

    if model is None:
        raise GraphError("the torch backend measures a real model; name one with --model")
    try:
        return TorchBackend(graph, model, list(devices) or ["cpu"], timing or TimingConfig(), objective)
    except ValueError as e:
        raise GraphError(str(e)) from None
