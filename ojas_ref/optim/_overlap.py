"""Updates on a side stream (``InBackwardOptimizer(overlap=True)``, CUDA): :class:`UpdateStreams`
runs a bucket's update on a side stream of its device while the backward of the earlier layers goes
on on the compute stream. The same kernels on the same tensors: the same bits as ``overlap=False``
(tests/optim/test_in_backward.py)."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor


class UpdateStreams:
    """Per device, the side stream of the updates, and the update in flight on it: (compute stream,
    its end event, the bucket's gradients, kept alive until the compute stream waits for that
    event)."""

    def __init__(self) -> None:
        self.streams: dict[torch.device, Any] = {}
        self.in_flight: dict[torch.device, tuple[Any, Any, list[Tensor]]] = {}

    def stream(self, device: torch.device) -> Any:
        """The side stream of the updates on ``device`` (made at its first use)."""
        side = self.streams.get(device)
        if side is None:
            side = self.streams[device] = torch.cuda.Stream(device)
        return side

    def run(self, side: Any, bucket: list[Tensor], update: Callable[[], None]) -> None:
        """Run ``update`` (of the parameters of ``bucket``, all on one CUDA device) on ``side``, after
        the compute stream's work so far (the bucket's gradients complete, its parameters read); the
        update before it on that device is then over before what follows on the compute stream
        (:meth:`release`), and this one is in flight."""
        device = bucket[0].device
        compute = torch.cuda.current_stream(device)
        side.wait_stream(compute)  # the bucket's gradients are complete, its parameters read
        with torch.cuda.stream(side):
            update()
        done = torch.cuda.Event()
        done.record(side)
        self.release(device)  # the previous bucket's update is over before what follows
        self.in_flight[device] = (compute, done, [p.grad for p in bucket])

    def release(self, device: torch.device) -> None:
        """The compute stream waits for the update in flight on ``device`` (queued: the host does
        not wait), then that update's gradients are dropped: in the compute stream's order, so
        the allocator can hand their blocks out to its next kernels at once (no ``record_stream``,
        whose blocks wait for the device to catch up, which a host running ahead of the device
        would pay in memory). So at most one bucket's gradients are in flight beside the
        pending bucket."""
        in_flight = self.in_flight.pop(device, None)
        if in_flight is not None:
            compute, done, _grads = in_flight
            compute.wait_event(done)

    def join(self) -> None:
        """At the end of the backward pass: the compute streams wait for the last updates."""
        for device in list(self.in_flight):
            self.release(device)
