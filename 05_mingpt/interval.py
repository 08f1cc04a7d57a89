"""Lesson 05: what the steps since the last progress line add up to.

Used by `trainer.py` (see main.py's docstring for the commands that launch the lesson).
"""

import time
from contextlib import contextmanager

import torch


class Interval:
    """What the steps since the last progress line add up to, kept on the device (no
    waiting for the GPU each step), and their training time."""

    def __init__(self, device: torch.device):
        self.loss_sum = torch.zeros((), device=device)
        self.norm_sum = torch.zeros((), device=device)
        self.finite_norms = torch.zeros((), device=device)
        self.steps, self.start, self.excluded = 0, time.perf_counter(), 0.0

    def add(self, loss: torch.Tensor, grad_norm: torch.Tensor) -> None:
        finite = torch.isfinite(grad_norm)  # fp16: inf or nan when the scaler skips
        self.loss_sum += loss
        self.norm_sum += torch.where(finite, grad_norm, 0.0)
        self.finite_norms += finite
        self.steps += 1

    @contextmanager
    def paused(self):
        """Time spent inside does not count as training time."""
        start = time.perf_counter()
        yield
        self.excluded += time.perf_counter() - start

    def seconds(self) -> float:
        return time.perf_counter() - self.start - self.excluded
