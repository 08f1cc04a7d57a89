"""Exercise 02 · accumulate: gradient accumulation that all-reduces once per step.

With K micro-batches per optimizer step, the gradients must be averaged over the
ranks once per step, not once per micro-batch: K-1 of the K all-reduces would be
wasted traffic. DDP all-reduces in every backward pass unless the *forward* pass ran
with synchronization off, inside `model.no_sync()` (the lesson's
`grad_accumulation.py` shows all three ways to get this right or wrong).

Task: write `accumulation_step`: one optimizer step of a DDP model over this rank's
micro-batches. Afterwards the weights must be what one process would get from one
step on the whole batch (every micro-batch of every rank, equal sizes), with the mean
squared error as the loss, and DDP must have all-reduced the gradients exactly once.

The check starts a 2-process gloo world on this machine; in each process it wraps a
`Linear(20, 1)` in DDP with a hook that counts all-reduces, calls your function for 3
steps of 4 micro-batches, and compares the weights of the ranks with each other and
with one process trained on the whole batches. Hint: the gradients add up over backward
passes, so divide each micro-batch's loss by the number of micro-batches.
"""

import torch
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
        # TODO: the forward and backward of this micro-batch (the loss:
        # torch.nn.functional.mse_loss), inside model.no_sync() unless it is the last
        # one; after the loop, the optimizer's step.
        raise NotImplementedError(
            f"accumulation_step: micro-batch {index}, {len(inputs)} samples, "
            f"targets of shape {tuple(targets.shape)}"
        )
