"""Lesson 02: batch normalization across ranks (`SyncBatchNorm`), and what works on CPU.

BatchNorm normalizes with the mean and variance of the batch. Under DDP each rank sees
only its own part of the global batch, so plain BatchNorm normalizes with *local*
statistics: the model trained on N ranks is not the model one process would train
on the global batch. `nn.SyncBatchNorm` all-reduces the statistics so that every rank
normalizes with those of the global batch.

What this run shows, on the device it finds:

1. `torch`: `nn.SyncBatchNorm` under DDP. It works on CUDA (and a few other
   accelerators); on CPU PyTorch refuses it, and the run prints PyTorch's own error.
2. `local`: plain `BatchNorm1d`: trains, but differs from the one-process model.
3. `synced`: the same idea written out (`AllReduceBatchNorm1d` below): all-reduce
   count, sum and sum of squares with an all_reduce that autograd can differentiate
   (`AllReduceSum`), then normalize. It works on gloo and equals the
   one-process model on the global batch.

Every mode is compared with one process trained on the global batch, on the same
device as the DDP runs (a GPU run is never compared with a CPU run).

Each rank's inputs are shifted by its rank, so local statistics differ a lot, as they
do when the ranks' batches are small or their data is not shuffled together.

Launch it (from any folder, with the path to this file):

    torchrun --standalone --nproc_per_node=2 sync_batchnorm.py
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from common.cli import LessonArgumentParser
from common.data import IN_FEATURES, SyntheticRegression
from common.distributed import device_for, end_process, log0, torchrun_env

LAUNCH = "torchrun --standalone --nproc_per_node=2 sync_batchnorm.py [--steps 10]"
BATCH_SIZE = 8  # per rank: small, so that local statistics are noisy
HIDDEN = 16


class AllReduceSum(torch.autograd.Function):
    """all_reduce(SUM) that autograd can differentiate: every rank's output depends on
    every rank's input, so the backward sums the output gradients of all ranks."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        total = tensor.clone()
        dist.all_reduce(total)
        return total

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor) -> torch.Tensor:
        grad = grad_output.clone()
        dist.all_reduce(grad)
        return grad


class AllReduceBatchNorm1d(nn.BatchNorm1d):
    """BatchNorm1d whose training statistics are those of the batch of all ranks."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return super().forward(x)
        count = torch.full((1,), float(x.shape[0]), dtype=x.dtype, device=x.device)
        local = torch.cat([count, x.sum(dim=0), (x * x).sum(dim=0)])
        # Differentiable: the backward all-reduces the gradients of the statistics, so
        # each rank's loss also reaches the samples of the other ranks, as on one process.
        total = AllReduceSum.apply(local)
        n, sums, squares = total[0], total[1 : 1 + x.shape[1]], total[1 + x.shape[1] :]
        mean = sums / n
        variance = squares / n - mean * mean  # biased, as BatchNorm normalizes with it
        with torch.no_grad():
            self.num_batches_tracked += 1
            m = self.momentum
            self.running_mean.mul_(1 - m).add_(m * mean)
            self.running_var.mul_(1 - m).add_(m * variance * n / (n - 1))  # unbiased
        normalized = (x - mean) / torch.sqrt(variance + self.eps)
        return normalized * self.weight + self.bias


def make_model(norm: type[nn.Module]) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(IN_FEATURES, HIDDEN), norm(HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 1)
    )


def batches(steps: int, world_size: int):
    """Global batches; rank r's share of each is shifted by r."""
    dataset = SyntheticRegression(size=BATCH_SIZE * world_size * steps)
    shift = torch.arange(world_size).repeat_interleave(BATCH_SIZE).unsqueeze(1).float()
    for step in range(steps):
        rows = slice(step * BATCH_SIZE * world_size, (step + 1) * BATCH_SIZE * world_size)
        yield dataset.inputs[rows] + shift, dataset.targets[rows]


def flat_state(model: nn.Module) -> torch.Tensor:
    """Parameters and running statistics, flattened into one tensor."""
    return torch.cat([t.detach().float().flatten().cpu() for t in model.state_dict().values()])


def train_ddp(model: nn.Module, steps: int, device: torch.device) -> torch.Tensor:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    ddp = DDP(model.to(device), device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
    mine = slice(rank * BATCH_SIZE, (rank + 1) * BATCH_SIZE)
    for inputs, targets in batches(steps, world_size):
        optimizer.zero_grad()
        F.mse_loss(ddp(inputs[mine].to(device)), targets[mine].to(device)).backward()
        optimizer.step()
    return flat_state(ddp.module)


def train_one_process(steps: int, world_size: int, device: torch.device) -> torch.Tensor:
    """The baseline: plain BatchNorm, one process, the whole global batch, on the device
    of the DDP runs, so that only the synchronization differs."""
    model = make_model(nn.BatchNorm1d).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for inputs, targets in batches(steps, world_size):
        optimizer.zero_grad()
        F.mse_loss(model(inputs.to(device)), targets.to(device)).backward()
        optimizer.step()
    return flat_state(model)


def main() -> None:
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument("--steps", type=int, default=10, help="optimizer steps")
    args = parser.parse_args()
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    local_rank, _, world_size = torchrun_env(launch_hint=LAUNCH)
    device = device_for(local_rank)
    dist.init_process_group(
        backend=dist.get_default_backend_for_device(device),
        device_id=device if device.type == "cuda" else None,  # nccl: this GPU, connect now
    )
    baseline = train_one_process(args.steps, world_size, device)  # alike on every rank

    try:
        torch_sync = nn.SyncBatchNorm.convert_sync_batchnorm(make_model(nn.BatchNorm1d))
        difference = (train_ddp(torch_sync, args.steps, device) - baseline).abs().max()
        log0(f"mode torch  | nn.SyncBatchNorm | max |w - one process| {difference:.2e}")
    except ValueError as error:  # raised alike on every rank, before any collective
        log0(f"mode torch  | nn.SyncBatchNorm is refused on {device.type}: {error}")

    for mode, norm in (("local", nn.BatchNorm1d), ("synced", AllReduceBatchNorm1d)):
        difference = (train_ddp(make_model(norm), args.steps, device) - baseline).abs().max()
        log0(f"mode {mode:<6} | {norm.__name__} | max |w - one process| {difference:.2e}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    end_process()  # not Python's teardown: see common.distributed.end_process
