"""Lesson 02: gradient accumulation with `no_sync`, counting the all-reduces.

Accumulating K micro-batches before each optimizer step needs the gradients averaged
over the ranks once per step, not once per micro-batch. DDP all-reduces in every
backward pass unless the forward pass ran with synchronization off: inside
`model.no_sync()`, or with `model.require_backward_grad_sync = False`.

A communication hook counts the all-reduces DDP launches (one per gradient bucket per
synchronized backward; this model's gradients fit in one bucket). Three ways to train
the same steps on the same data:

- `every`:    no no_sync; every micro-batch's backward all-reduces: K per step;
- `no_sync`:  the first K-1 micro-batches run forward *and* backward inside
              `no_sync()`; only the last one all-reduces: 1 per step;
- `too_late`: the pitfall: only the backward is inside `no_sync()`. DDP decides
              during the forward pass whether the next backward synchronizes, so
              entering no_sync after it changes nothing: K per step again.

All three end with the same weights (averaging is linear, so averaging once per step
or per micro-batch gives the same sum); only the traffic differs.

`--buckets K` (exercise 1) trains K bias-free linear layers instead, with a bucket cap
of one byte, so that each layer's gradient is a bucket of its own, and prints how many
buckets each synchronized backward all-reduced: DDP's first one has a single bucket,
since DDP rebuilds its buckets after it, in the order the gradients arrived.

Launch it (from any folder, with the path to this file):

    torchrun --standalone --nproc_per_node=2 grad_accumulation.py
    torchrun --standalone --nproc_per_node=2 grad_accumulation.py --steps 8 --accumulate 4
    torchrun --standalone --nproc_per_node=2 grad_accumulation.py --buckets 3
"""

import contextlib

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from common.cli import LessonArgumentParser
from common.data import IN_FEATURES, SyntheticRegression
from common.distributed import device_for, end_process, log0, torchrun_env
from common.models import regression_model

LAUNCH = "torchrun --standalone --nproc_per_node=2 grad_accumulation.py [--steps 8]"
MICRO_BATCH = 16
MODES = ("every", "no_sync", "too_late")


def counting_allreduce(state: dict, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's own all-reduce hook, plus a record of each bucket DDP hands it."""
    state["buckets"].append(bucket.index())
    return default_hooks.allreduce_hook(None, bucket)


def model_and_cap(buckets: int) -> tuple[nn.Module, float | None]:
    """The lesson's model with DDP's default buckets, or (exercise 1) `buckets` bias-free
    layers and a 1-byte cap: a bucket closes once it reaches its cap, so one per layer."""
    if buckets == 1:
        return regression_model(seed=0), None
    torch.manual_seed(0)
    widths = [IN_FEATURES] * buckets + [1]
    layers = [nn.Linear(a, b, bias=False) for a, b in zip(widths, widths[1:], strict=False)]
    return nn.Sequential(*layers), 1 / 2**20


def train(
    mode: str, steps: int, accumulate: int, device: torch.device, buckets: int = 1
) -> tuple[list[int], torch.Tensor]:
    """Train `steps` optimizer steps of `accumulate` micro-batches each; return the
    index of every bucket DDP all-reduced, in order, and the final weights."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    module, cap_mb = model_and_cap(buckets)
    model = DDP(
        module.to(device),
        device_ids=[device.index] if device.type == "cuda" else None,
        bucket_cap_mb=cap_mb,
    )
    counter = {"buckets": []}
    model.register_comm_hook(counter, counting_allreduce)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    dataset = SyntheticRegression(size=MICRO_BATCH * world_size * steps * accumulate)

    for step in range(steps):
        optimizer.zero_grad()
        for micro in range(accumulate):
            # This rank's slice of the global micro-batch.
            start = ((step * accumulate + micro) * world_size + rank) * MICRO_BATCH
            source = dataset.inputs[start : start + MICRO_BATCH].to(device)
            targets = dataset.targets[start : start + MICRO_BATCH].to(device)
            last = micro == accumulate - 1
            skip_sync = model.no_sync() if not last else contextlib.nullcontext()
            if mode == "every":
                loss = F.mse_loss(model(source), targets) / accumulate
                loss.backward()
            elif mode == "no_sync":
                with skip_sync:  # the forward pass decides, so it goes inside
                    loss = F.mse_loss(model(source), targets) / accumulate
                    loss.backward()
            else:  # too_late
                loss = F.mse_loss(model(source), targets) / accumulate
                with skip_sync:  # too late: the forward already armed the all-reduce
                    loss.backward()
        optimizer.step()
    weights = torch.cat([p.detach().flatten() for p in model.parameters()]).cpu()
    return counter["buckets"], weights


def per_backward(buckets: list[int]) -> list[int]:
    """How many buckets each synchronized backward all-reduced: each starts at bucket 0."""
    starts = [i for i, index in enumerate(buckets) if index == 0] + [len(buckets)]
    return [end - start for start, end in zip(starts, starts[1:], strict=False)]


def main() -> None:
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps")
    parser.add_argument("--accumulate", type=int, default=4, help="micro-batches per step")
    parser.add_argument("--buckets", type=int, default=1, help="layers, one bucket each")
    args = parser.parse_args()
    if args.steps < 1 or args.accumulate < 1 or args.buckets < 1:
        parser.error("--steps, --accumulate and --buckets must be at least 1")
    local_rank, _, world_size = torchrun_env(launch_hint=LAUNCH)
    device = device_for(local_rank)
    dist.init_process_group(
        backend=dist.get_default_backend_for_device(device),
        device_id=device if device.type == "cuda" else None,  # nccl: this GPU, connect now
    )

    log0(f"{args.steps} steps x {args.accumulate} micro-batches, {world_size} ranks")
    results = {
        mode: train(mode, args.steps, args.accumulate, device, args.buckets) for mode in MODES
    }
    for mode, (buckets, weights) in results.items():
        difference = (weights - results["every"][1]).abs().max().item()
        sizes = per_backward(buckets)
        later = "/".join(str(n) for n in sorted(set(sizes[1:])))
        log0(
            f"mode {mode:<8} | all-reduces {len(buckets):3d} "
            f"| per step {len(buckets) / args.steps:g} "
            f"| buckets: first backward {sizes[0]}, later {later or '-'} "
            f"| max |w - w_every| {difference:.2e}"
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    end_process()  # not Python's teardown: see common.distributed.end_process
