"""Lesson 05: what the steps since the last progress line add up to, and the line of
metrics.jsonl that records them.

Used by `trainer.py` (see main.py's docstring for the commands that launch the lesson).
"""

import json
import math
import time
from contextlib import contextmanager

import torch
import torch.distributed as dist


def metrics_line(metrics: dict) -> str:
    """One line of metrics.jsonl, strict JSON. JSON has no infinity or NaN (json.dumps
    would write `Infinity`, which strict readers refuse): a value that is not finite, as
    the gradient norm of an interval whose fp16 steps all overflowed, is written null."""
    finite = {
        key: None if isinstance(value, float) and not math.isfinite(value) else value
        for key, value in metrics.items()
    }
    return json.dumps(finite, allow_nan=False)


class Interval:
    """What the steps since the last progress line add up to, and their training time.
    The sums stay on the device, so adding a step to them does not wait for a GPU."""

    def __init__(self, device: torch.device):
        self.device = device
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
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # the steps before it count, and run now
        start = time.perf_counter()
        yield
        self.excluded += time.perf_counter() - start

    def seconds(self) -> float:
        # A GPU runs behind the Python that queues its work: the clock stops when the
        # interval's last step has run, not when it was queued.
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - self.start - self.excluded

    def summary(self, world_size: int) -> tuple[float, float, int]:
        """(the mean loss over the interval's steps and every rank, the mean finite
        gradient norm, how many steps fp16 skipped). A collective: every rank calls it."""
        dist.all_reduce(self.loss_sum)  # the gradient norms are the same on every rank
        mean_loss = self.loss_sum.item() / (self.steps * world_size)  # waits for a GPU
        finite = int(self.finite_norms.item())
        grad_norm = self.norm_sum.item() / finite if finite else math.inf
        return mean_loss, grad_norm, self.steps - finite
