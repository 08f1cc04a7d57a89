"""Lesson 02, DDP's options: syncing buffers, shown on BatchNorm's running statistics.

Buffers are a module's tensors that are not parameters: BatchNorm's running mean and
variance, which it updates in every training forward pass and normalizes with in
evaluation. DDP averages gradients, never buffers. It copies rank 0's buffers to
every rank when it wraps the model and, with `forward_sync_buffers=True` (the
default), again at the start of each forward pass that follows a training step; with
`False` each rank keeps its own after the start. Its older name, `broadcast_buffers`,
is deprecated since PyTorch 2.13 (and its `False` also skipped the copy at the start);
before 2.13 it is the only name.

Each rank's inputs are shifted by its rank (as in `sync_batchnorm.py`), so each rank's
batches have their own mean. After a few training steps the run prints, for each
setting:

- rank 0's running mean, and the running mean of a BatchNorm that saw rank 0's
  batches only, or every rank's batches (what one process on the global batch, or
  `SyncBatchNorm` on GPUs, would track);
- whether the ranks' models give the same outputs in evaluation mode.

Then, on gloo, the classic validation hang: rank 0 alone evaluates through the DDP
wrapper, whose forward pass starts with the buffers' broadcast, a collective the other
ranks never join; they wait at a barrier. Both wait until the timeout of the process
group (HANG_SECONDS here). Through `model.module`, nothing waits.

Launch it (from any folder, with the path to this file):

    torchrun --standalone --nproc_per_node=2 sync_buffers.py
"""

import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from common.cli import LessonArgumentParser, positive_int
from common.data import IN_FEATURES, SyntheticRegression
from common.distributed import device_for, end_process, log, log0, torchrun_env
from common.replicas import largest_difference_between_ranks
from common.versions import needs_torch

LAUNCH = "torchrun --standalone --nproc_per_node=2 sync_buffers.py [--steps 5]"
BATCH_SIZE, SHIFT = 16, 2.0
HANG_SECONDS = 3  # the timeout of the group in which rank 0 evaluates alone


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.BatchNorm1d(IN_FEATURES), nn.Linear(IN_FEATURES, 1))


def batch_of(rank: int, step: int, world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank `rank`'s batch of step `step`, its inputs shifted by SHIFT x rank."""
    data = SyntheticRegression(size=(step + 1) * world_size * BATCH_SIZE)
    start = (step * world_size + rank) * BATCH_SIZE
    rows = slice(start, start + BATCH_SIZE)
    return data.inputs[rows] + SHIFT * rank, data.targets[rows]


def running_mean_over(
    ranks: list[int], steps: int, world_size: int, device: torch.device
) -> torch.Tensor:
    """The running mean a lone BatchNorm tracks over the batches of `ranks`, step by
    step (several ranks: their batches concatenated, as one process would see them).
    On the training's device: the same kernels, so "equal" can mean bit for bit."""
    norm = nn.BatchNorm1d(IN_FEATURES).to(device)
    for step in range(steps):
        norm(torch.cat([batch_of(rank, step, world_size)[0] for rank in ranks]).to(device))
    return norm.running_mean


def evaluate_on_rank_0_alone(through_wrapper: bool, device: torch.device) -> str:
    """A training step, then rank 0 alone evaluates, through the DDP wrapper or its
    `.module`, while the other ranks wait at a barrier, all in a group whose timeout is
    HANG_SECONDS. Returns what happened on this rank."""
    group = dist.new_group(timeout=timedelta(seconds=HANG_SECONDS))
    rank = dist.get_rank()
    model = DDP(make_model().to(device), process_group=group)
    inputs, targets = batch_of(rank, 0, dist.get_world_size())
    F.mse_loss(model(inputs.to(device)), targets.to(device)).backward()
    started = time.perf_counter()
    try:
        if rank == 0:
            model.eval()
            with torch.no_grad():
                (model if through_wrapper else model.module)(inputs.to(device))
        dist.barrier(group=group)
        return f"the ranks met at the barrier after {time.perf_counter() - started:.1f} s"
    except RuntimeError:
        return f"RuntimeError after {time.perf_counter() - started:.0f} s (the group's timeout)"


def main() -> None:
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument("--steps", type=positive_int, default=5, help="training steps")
    args = parser.parse_args()
    needs_torch("2.13", "sync_buffers.py (DDP's forward_sync_buffers)")
    local_rank, rank, world_size = torchrun_env(launch_hint=LAUNCH)
    device = device_for(local_rank)
    dist.init_process_group(
        backend=dist.get_default_backend_for_device(device),
        device_id=device if device.type == "cuda" else None,  # nccl: this GPU, connect now
    )
    rank_0s_only = running_mean_over([0], args.steps, world_size, device)
    global_batch = running_mean_over(list(range(world_size)), args.steps, world_size, device)
    test_inputs = SyntheticRegression(size=64, seed=1).inputs.to(device)

    for forward_sync in (True, False):
        model = DDP(
            make_model().to(device),
            device_ids=[device.index] if device.type == "cuda" else None,
            forward_sync_buffers=forward_sync,
        )
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        for step in range(args.steps):
            inputs, targets = batch_of(rank, step, world_size)
            optimizer.zero_grad()
            F.mse_loss(model(inputs.to(device)), targets.to(device)).backward()
            optimizer.step()
        running_mean = model.module[0].running_mean  # on the device, for nccl
        after_training = largest_difference_between_ranks(running_mean)
        model.eval()
        with torch.no_grad():  # through DDP: with forward_sync_buffers, rank 0's buffers first
            outputs = model(test_inputs)
        log0(
            f"forward_sync_buffers={forward_sync}: after training, running mean "
            f"max |rank - rank 0| {after_training:.2f} "
            f"| rank 0's: max |. - rank 0's batches only| "
            f"{(running_mean - rank_0s_only).abs().max():.1e}, "
            f"max |. - global batch| {(running_mean - global_batch).abs().max():.2f}"
        )
        log0(
            f"forward_sync_buffers={forward_sync}: evaluation outputs "
            f"max |rank - rank 0| {largest_difference_between_ranks(outputs):.2e}"
        )
    if dist.get_backend() == "gloo":  # nccl's watchdog would end the processes instead
        for through_wrapper in (True, False):
            outcome = evaluate_on_rank_0_alone(through_wrapper, device)
            way = "the DDP wrapper" if through_wrapper else "model.module"
            log(f"rank 0 evaluates alone through {way}: {outcome}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    end_process()  # not Python's teardown: see common.distributed.end_process
