"""Lesson 02, DDP's options: `static_graph=True`, shown on activation checkpointing.

Activation checkpointing saves memory by not keeping a block's activations: its
backward pass runs the block's forward again. The older, *reentrant* way
(`checkpoint(..., use_reentrant=True)`) does it in a backward pass of its own, inside
the main one. DDP counts, for each parameter, the moment its gradient is ready, and
all-reduces its bucket then; a reentrant backward breaks that count in two ways:

- `twice`: one layer checkpointed twice in a forward pass. Its gradient arrives in two
  parts, from two reentrant backward passes, and DDP counts the layer ready at the
  first. What the second part meets depends on where the layer is:
  - the model's first layer, as here: its parts are the last gradients of the step, so
    the first part completes the step; DDP all-reduces, finishes the step, and ignores
    the second part, which stays local: each rank ends with a *different* gradient, and
    nothing says so;
  - `twice, after another layer`: the step still waits for that layer's gradient when
    the second part arrives: RuntimeError at step 0, "Expected to mark a variable ready
    only once", the error people usually meet;
- `unused`: a layer checkpointed once, with `find_unused_parameters=True`. DDP's
  search for unused parameters cannot see into the checkpoint, marks the layer ready
  at once, and its gradient arrives later: RuntimeError, "Expected to mark a variable
  ready only once".

`static_graph=True` tells DDP that the same parameters are used the same way at every
step. DDP then records in the first step how often each gradient arrives and which
parameters go unused, and waits for all of it at every later step: both cases train
right. Checkpointing with `use_reentrant=False`, PyTorch's recommended way, avoids
the problem without the option.

Each case is compared with one process running the same model on the whole batch.

Launch it (from any folder, with the path to this file):

    torchrun --standalone --nproc_per_node=2 static_graph.py
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint

from common.cli import LessonArgumentParser
from common.data import IN_FEATURES, SyntheticRegression
from common.distributed import device_for, end_process, log0, torchrun_env
from common.replicas import largest_difference_between_ranks

LAUNCH = "torchrun --standalone --nproc_per_node=2 static_graph.py"
BATCH_SIZE, STEPS = 16, 3


class Checkpointed(nn.Module):
    """`layer` checkpointed `uses` times in a row, then a head; with `first_layer`
    False, after another layer."""

    def __init__(self, uses: int, reentrant: bool, first_layer: bool = True):
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.Linear(IN_FEATURES, IN_FEATURES)
        self.head = nn.Linear(IN_FEATURES, 1)
        self.before = None if first_layer else nn.Linear(IN_FEATURES, IN_FEATURES)
        self.uses, self.reentrant = uses, reentrant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.before is not None:
            x = self.before(x)
        for _ in range(self.uses):
            x = checkpoint(self.layer, x, use_reentrant=self.reentrant)
        return self.head(x)


def whole_batch(step: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    world_size = dist.get_world_size()
    data = SyntheticRegression(size=STEPS * world_size * BATCH_SIZE)
    start, end = step * world_size * BATCH_SIZE, (step + 1) * world_size * BATCH_SIZE
    return data.inputs[start:end].to(device), data.targets[start:end].to(device)


def run(
    case: str, uses: int, reentrant: bool, device: torch.device, first_layer=True, **ddp_options
) -> None:
    """Compute STEPS gradients with DDP; print how far they are from one process's on
    the whole batch, and from rank 0's."""
    rank = dist.get_rank()
    model = DDP(
        Checkpointed(uses, reentrant, first_layer).to(device),
        device_ids=[device.index] if device.type == "cuda" else None,
        **ddp_options,
    )
    reference = Checkpointed(uses, False, first_layer).to(device)  # one process, no DDP
    options = ", ".join(f"{k}={v}" for k, v in ddp_options.items()) or "no option"
    title = f"{case} (layer used {uses}x, use_reentrant={reentrant}, {options})"
    try:
        for step in range(STEPS):
            inputs, targets = whole_batch(step, device)
            mine = slice(rank * BATCH_SIZE, (rank + 1) * BATCH_SIZE)
            # Inputs that need a gradient: the reentrant checkpoint needs one to run
            # its backward at all.
            model.zero_grad()
            F.mse_loss(model(inputs[mine].requires_grad_()), targets[mine]).backward()
            reference.zero_grad()
            F.mse_loss(reference(inputs), targets).backward()
    except RuntimeError as error:
        log0(f"{title}: RuntimeError at step {step}: {str(error).splitlines()[0]}")
        return
    gradient = model.module.layer.weight.grad
    between_ranks = largest_difference_between_ranks(gradient)
    from_reference = (gradient - reference.layer.weight.grad).abs().max().item()
    log0(
        f"{title}: step {STEPS - 1} layer gradient: max |rank - rank 0| {between_ranks:.1e}"
        f" | max |DDP - one process| {from_reference:.1e}"
    )


def main() -> None:
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.parse_args()
    local_rank, _, _ = torchrun_env(launch_hint=LAUNCH)
    device = device_for(local_rank)
    dist.init_process_group(
        backend=dist.get_default_backend_for_device(device),
        device_id=device if device.type == "cuda" else None,  # nccl: this GPU, connect now
    )

    run("twice", uses=2, reentrant=True, device=device)
    run("twice", uses=2, reentrant=True, device=device, static_graph=True)
    run("twice", uses=2, reentrant=False, device=device)
    run("unused", uses=1, reentrant=True, device=device, static_graph=True)
    # Last, these two raise (on every rank alike), leaving their models mid-step.
    run("twice, after another layer", uses=2, reentrant=True, device=device, first_layer=False)
    run("unused", uses=1, reentrant=True, device=device, find_unused_parameters=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    end_process()  # not Python's teardown: see common.distributed.end_process
