"""Pipelined inference of a placed program: the time per sample when consecutive samples overlap.

Under the throughput objective (Tarnawski et al.: pipelined inference, the largest device
load per sample) samples stream through a placement's stages: while the GPU runs sample
*j*'s stage, the CPU runs sample *j + 1*'s. :class:`PipelinedRunner` measures that for
real. A round pushes ``samples`` inferences through the placed program, ``in_flight`` of
them at once, each in a worker thread of its own. One stage at a time may use a device: a
lock per device (by name, as placements name devices) is held while a stage runs, and on
a GPU until its work is done. So the devices' loads overlap as a pipeline's do, and no
device runs two stages at once. A round's time divided by ``samples`` is the time per
sample. Filling and draining the pipeline is paid once per round, so a round holds several
samples per worker.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import torch

from envs.pytorch.stages import OnDevice, to_host

__all__ = ["PipelinedRunner", "in_flight_for"]


def in_flight_for(stages: int) -> int:
    """Samples in flight for a placement of ``stages`` stages: one per stage (each stage
    may hold one), at most 4 (deeper adds threads, not overlap, on two or three devices).
    One stage cannot overlap with itself: its samples run one after another, without the
    threads' hand-overs."""
    return max(1, min(4, stages))


class PipelinedRunner:
    """``infer()`` pushes ``samples`` inferences of ``placed`` through it, ``in_flight`` at a
    time; ``outputs`` holds the last one's outputs on the host.

    The placed program's :class:`~envs.pytorch.stages.OnDevice` stages get a lock of their
    device for as long as the runner lives (:meth:`close` removes them).
    """

    def __init__(self, placed, inputs: Sequence[torch.Tensor], in_flight: int, samples: int) -> None:
        if in_flight < 1 or samples < in_flight:
            raise ValueError(f"a round needs at least one sample per worker ({samples} samples, "
                             f"{in_flight} in flight)")
        self.placed, self.inputs = placed, tuple(inputs)
        self.in_flight, self.samples = in_flight, samples
        self.outputs = None
        self._stages = [m for m in placed.modules() if isinstance(m, OnDevice)]
        locks: dict[str, threading.Lock] = {}  # by device name: cpu and cpu:bf16 are two
        for m in self._stages:
            m.lock = locks.setdefault(m.device_name, threading.Lock())
        self._pool = ThreadPoolExecutor(in_flight, thread_name_prefix="pipelined")
        self._next = 0
        self._count = threading.Lock()

    def _worker(self) -> list[torch.Tensor]:
        last = None
        with torch.inference_mode():
            while True:
                with self._count:
                    if self._next >= self.samples:
                        return last
                    self._next += 1
                last = to_host(self.placed(*self.inputs))

    def infer(self) -> None:
        self._next = 0
        for f in [self._pool.submit(self._worker) for _ in range(self.in_flight)]:
            out = f.result()
            if out is not None:
                self.outputs = out

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        for m in self._stages:
            m.lock = None
