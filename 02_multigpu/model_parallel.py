"""Lesson 02: DDP over a model split in two stages (model parallel inside each rank).

A model too big for one device can be split: stage 1 on one device, stage 2 on
another, with the activations moved between them in `forward`. DDP still works on top:
each rank holds a whole two-stage replica, and DDP averages the gradients of both
stages. The one change: such a module spans several devices, so DDP gets no
`device_ids` (they name *the* device of a single-device module).

On a machine with 2 GPUs per process, local rank r puts its stages on cuda:2r and
cuda:2r+1. Elsewhere both stages share the process's device: the code path is the
same, only the devices differ.

The run checks the claim: after training, every rank holds the same weights, and they
equal a one-process, one-device model trained on the same global batches.

Launch it (from any folder, with the path to this file):

    torchrun --standalone --nproc_per_node=2 model_parallel.py
"""

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from common.cli import LessonArgumentParser
from common.data import IN_FEATURES, SyntheticRegression
from common.distributed import (
    device_for,
    device_type,
    end_process,
    log,
    log0,
    torchrun_env,
)

LAUNCH = "torchrun --standalone --nproc_per_node=2 model_parallel.py [--steps 20]"
BATCH_SIZE = 32
HIDDEN = 64


class TwoStageModel(nn.Module):
    """Two halves of a small network, each on its own device."""

    def __init__(self, first: torch.device, second: torch.device):
        super().__init__()
        torch.manual_seed(0)
        self.first, self.second = first, second
        self.stage1 = nn.Sequential(nn.Linear(IN_FEATURES, HIDDEN), nn.Tanh()).to(first)
        self.stage2 = nn.Linear(HIDDEN, 1).to(second)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.stage1(x.to(self.first))
        return self.stage2(hidden.to(self.second))  # activations cross devices here


def stage_devices(local_rank: int) -> tuple[torch.device, torch.device]:
    """Where this process's two stages live. Call before `init_process_group`.

    With 2 GPUs or more per process on this machine (GPUs / LOCAL_WORLD_SIZE, the
    processes torchrun started *here*), local rank r takes cuda:2r and cuda:2r+1, and
    makes cuda:2r its current device: nccl puts its communicator there, and
    `device_for` would pick cuda:r, which for r = 1 is rank 0's second stage.
    Otherwise both stages share the process's device."""
    if device_type() == "cuda":
        gpus_per_process = torch.cuda.device_count() // int(os.environ["LOCAL_WORLD_SIZE"])
        if gpus_per_process >= 2:
            first, second = (
                torch.device("cuda", 2 * local_rank),
                torch.device("cuda", 2 * local_rank + 1),
            )
            torch.cuda.set_device(first)
            return first, second
    device = device_for(local_rank)
    return device, device


def main() -> None:
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps")
    args = parser.parse_args()
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    local_rank, global_rank, world_size = torchrun_env(launch_hint=LAUNCH)
    first, second = stage_devices(local_rank)
    # nccl: bind the process to its GPU only when it has one. Bound to stage 1's GPU, a
    # process spanning two would see DDP's collectives on stage 2's parameters refused
    # ("Attempt to perform collective on tensor not on device passed to
    # init_process_group"); unbound, nccl connects per GPU at their first collective.
    dist.init_process_group(
        backend=dist.get_default_backend_for_device(first),
        device_id=first if first.type == "cuda" and first == second else None,
    )
    log(f"stage 1 on {first}, stage 2 on {second}")
    model = TwoStageModel(first, second)
    reference = TwoStageModel(first, first)  # the same seed: rank 0's one-device baseline
    # No device_ids: the module decides where its parameters and activations live.
    ddp_model = DDP(model)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.05)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.05)
    dataset = SyntheticRegression(size=BATCH_SIZE * world_size * args.steps)

    for step in range(args.steps):
        global_batch = slice(step * BATCH_SIZE * world_size, (step + 1) * BATCH_SIZE * world_size)
        mine = slice(
            global_batch.start + global_rank * BATCH_SIZE,
            global_batch.start + (global_rank + 1) * BATCH_SIZE,
        )
        optimizer.zero_grad()
        output = ddp_model(dataset.inputs[mine])
        loss = F.mse_loss(output, dataset.targets[mine].to(second))
        loss.backward()
        optimizer.step()
        if global_rank == 0:  # no collective in here: only rank 0 trains the baseline
            reference_optimizer.zero_grad()
            reference_loss = F.mse_loss(
                reference(dataset.inputs[global_batch]), dataset.targets[global_batch].to(first)
            )
            reference_loss.backward()
            reference_optimizer.step()
        if step in (0, args.steps - 1):
            log0(f"step {step} | loss on rank 0's batch {loss.item():.4f}")

    flat = torch.cat([p.detach().flatten().to(first) for p in ddp_model.module.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world_size)]
    dist.all_gather(gathered, flat)
    if global_rank == 0:
        identical = all(torch.equal(other, flat) for other in gathered)
        baseline = torch.cat([p.detach().flatten() for p in reference.parameters()])
        difference = (flat - baseline).abs().max().item()
        log(f"weights identical on all {world_size} ranks: {identical}")
        log(f"max |DDP two-stage - one process, one device| = {difference:.2e}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    end_process()  # not Python's teardown: see common.distributed.end_process
