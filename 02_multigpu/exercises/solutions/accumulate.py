"""Solution of exercise 02 · accumulate (the task is in `../accumulate.py`)."""

import contextlib

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def accumulation_step(
    model: DDP,
    optimizer: torch.optim.Optimizer,
    micro_batches: list[tuple[torch.Tensor, torch.Tensor]],
) -> None:
    """One optimizer step over `micro_batches`, this rank's list of (inputs, targets),
    with the gradients all-reduced once, during the last micro-batch's backward."""
    optimizer.zero_grad()
    for index, (inputs, targets) in enumerate(micro_batches):
        last = index == len(micro_batches) - 1
        sync = contextlib.nullcontext() if last else model.no_sync()
        # The forward pass decides whether the backward all-reduces: both go inside.
        with sync:
            # Gradients add up over the backward passes: dividing each micro-batch's
            # mean by their number makes the sum the mean over the whole batch.
            loss = F.mse_loss(model(inputs), targets) / len(micro_batches)
            loss.backward()
    optimizer.step()
