"""The worker's automatic-mixed-precision switch, toggled live by coordinator directives.

CPU: bfloat16 autocast (no loss scaling needed). CUDA: float16 autocast with dynamic
loss scaling, or bfloat16. The optimizer lives on the parameter server, so the loss
scaler here only scales the loss and unscales the flat gradient; a step whose
gradient overflowed is recomputed with a smaller scale rather than pushed.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch


@dataclass
class LossScaler:
    """Dynamic loss scaling (the GradScaler rule), for fp16 on CUDA."""

    scale: float = 2.0**16
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    _good_steps: int = 0

    def unscale_(self, grads: torch.Tensor) -> bool:
        """Divide the flat gradient by the scale in place; False if it overflowed."""
        grads.mul_(1.0 / self.scale)
        finite = bool(torch.isfinite(grads).all())
        self.update(found_inf=not finite)
        return finite

    def update(self, found_inf: bool) -> None:
        if found_inf:
            self.scale *= self.backoff_factor
            self._good_steps = 0
            return
        self._good_steps += 1
        if self._good_steps >= self.growth_interval:
            self.scale *= self.growth_factor
            self._good_steps = 0


class AmpSwitch:
    def __init__(self, device: torch.device, enabled: bool = False, cuda_dtype: torch.dtype = torch.float16):
        self.device = device
        self.enabled = enabled
        self.dtype = torch.bfloat16 if device.type == "cpu" else cuda_dtype
        self.scaler = LossScaler() if device.type == "cuda" and self.dtype == torch.float16 else None
        self.toggles = 0

    def set(self, enabled: bool) -> bool:
        """Returns True when the state changed."""
        if enabled == self.enabled:
            return False
        self.enabled = enabled
        self.toggles += 1
        return True

    def autocast(self) -> contextlib.AbstractContextManager:
        if not self.enabled:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor, grads: torch.Tensor) -> bool:
        """Backward into the flat gradient; False when an fp16 step overflowed and must be redone."""
        if self.enabled and self.scaler is not None:
            (loss * self.scaler.scale).backward()
            return self.scaler.unscale_(grads)
        loss.backward()
        return True
