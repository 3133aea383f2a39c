"""Host copies of a worker's flat buffers, for a model that computes on a GPU.

Every transport (shared memory, the socket channel, gRPC) moves bytes from host memory, so a
worker on CUDA stages its flat gradient into a pinned host buffer before a push and pulls
parameters into another before copying them up. On CPU the "host" buffers are the flat
buffers themselves: no copy, and the hot path stays what it was. A CPU worker that may share its host
with a PS also keeps its flat gradient in a shared-memory segment (star/shm.py GradSegment): backward
writes it there, and a PS on the same host sums it in place, so a push copies nothing.
"""

from __future__ import annotations

import logging

import torch

from star.flat import FlatModel
from star.logs import log
from star.shm import MAX_GRAD_SHARDS, GradSegment, ShmError, grad_segment_name

logger = logging.getLogger("worker")


class HostStaging:
    """`params` and `grads`: host tensors the PS client reads and writes, mirroring `flat`."""

    def __init__(self, flat: FlatModel, shared_grads: bool = False, worker_id: int = 0):
        """`shared_grads`: on CPU, put the flat gradient in a shared-memory segment (`grad_segment`; None when
        /dev/shm cannot hold it: pushes then copy, as before). `close()` unlinks it."""
        self.flat = flat
        self.on_host = flat.params.device.type == "cpu"
        self.grad_segment: GradSegment | None = None
        if self.on_host and shared_grads:
            try:
                self.grad_segment = GradSegment.create(grad_segment_name("worker", worker_id), flat.numel, MAX_GRAD_SHARDS)[0]
                flat.rebind_grads(self.grad_segment.area)
            except (OSError, ShmError) as exc:
                log(logger, logging.WARNING, "gradient not in shared memory: same-host pushes copy it", error=str(exc))
        if self.on_host:
            self.params, self.grads = flat.params, flat.grads
        else:  # pinned: the copies run at full PCIe/NVLink speed and need no bounce buffer
            self.params = torch.empty(flat.numel, dtype=torch.float32, pin_memory=True)
            self.grads = torch.empty(flat.numel, dtype=torch.float32, pin_memory=True)

    def params_down(self) -> torch.Tensor:
        """The device parameters copied to the host buffer (before seeding the PSs); returns it."""
        if not self.on_host:
            self.params.copy_(self.flat.params)
        return self.params

    def params_up(self) -> None:
        """After a pull into `params`: the model computes on them."""
        if not self.on_host:
            self.flat.params.copy_(self.params, non_blocking=True)

    def grads_down(self) -> torch.Tensor:
        """The gradient just computed, on the host (waits for the copy); returns it."""
        if not self.on_host:
            self.grads.copy_(self.flat.grads, non_blocking=True)
            torch.cuda.current_stream(self.flat.grads.device).synchronize()
        return self.grads

    def close(self) -> None:
        """Unlink the gradient segment, once (the model's `.grad`s stay views of its mapping until they are freed)."""
        if self.grad_segment is not None:
            self.grad_segment.close()
            self.grad_segment = None
