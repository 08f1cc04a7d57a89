"""Lesson 02: ranks with different numbers of batches, the hang, and `Join`.

DDP all-reduces the gradients of every backward pass, so every rank must run the
same number of steps. Here rank r has `--batches + r` batches: rank 0 finishes
first and moves on to the barrier that ends the epoch, while rank 1's last backward
waits in an all_reduce that rank 0 will never join. Neither can proceed: the job
hangs until the process group's `--timeout` ends it with an error. (DDP runs on a group
of every rank made with that timeout, `new_group(timeout=...)`: joining keeps the
default, so that a process that starts late does not fail a short one.)

With `--join`, the loop runs inside `Join([model])`: a rank that runs out of batches
"joins" and, until every rank has, shadows the others' all-reduces with zeros, so
the ranks still holding data finish their steps. The replicas then differ (a joined
rank takes no more optimizer steps), until the context ends: DDP's join hook then
broadcasts the parameters of the last rank to join to every rank. The script prints
a digest of each rank's weights just before and after that, to show it. The
optimizer's state is not synchronized (momentum or Adam states would stay different).

`Join` also costs traffic, even when no rank runs out. In this PyTorch every forward
pass inside it adds two one-element all-reduces (this model has no buffers; a model
with buffers adds one more, and so does `throw_on_early_termination=True`):
`Join.notify_join_context` ("I have not joined"), then DDP's
`_check_global_requires_backward_grad_sync` ("a backward all-reduce is coming").
A joined rank matches both for each step it shadows ("how many ranks have not joined?",
then "is a backward all-reduce coming?"). Leaving adds two more on every rank: "how many
have not joined?" (0: done), and, in DDP's join hook, "who joined last?" before the
final broadcast. `common.traffic.counting_all_reduce` counts them as
`torch.distributed.all_reduce` calls (the gradients are all-reduced from C++, unseen
there), and the script prints the counts.

Launch it (from any folder, with the path to this file):

    torchrun --standalone --nproc_per_node=2 uneven_inputs.py --timeout 3   # hangs, then fails
    torchrun --standalone --nproc_per_node=2 uneven_inputs.py --join        # finishes

Without `--join` it runs on the CPU only: under gloo the rank with a batch left and the
rank without one wait in collectives that never pair (gloo compares nothing; it waits
for a partner), and the timeout ends it; nccl pairs collectives by their order alone and
would match them wrongly. On a GPU machine, prefix the first command with DDP_DEVICE=cpu.
"""

import hashlib
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP

from common.cli import LessonArgumentParser, positive_seconds
from common.data import SyntheticRegression
from common.distributed import device_for, end_process, log, torchrun_env
from common.models import regression_model
from common.traffic import counting_all_reduce

LAUNCH = "torchrun --standalone --nproc_per_node=2 uneven_inputs.py [--join] [--timeout 3]"
BATCH_SIZE = 16


def weights_digest(model: torch.nn.Module) -> str:
    """A short fingerprint of the parameters: equal digests, bit-identical weights."""
    flat = torch.cat([p.detach().flatten().cpu() for p in model.parameters()])
    return hashlib.sha256(flat.numpy().tobytes()).hexdigest()[:12]


def main() -> None:
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument("--join", action="store_true", help="wrap the loop in Join([model])")
    parser.add_argument("--batches", type=int, default=4, help="batches on rank 0 (rank r: +r)")
    parser.add_argument(
        "--timeout", type=positive_seconds, default=3.0, help="process group timeout (s)"
    )
    args = parser.parse_args()
    if args.batches < 1:
        parser.error("--batches must be >= 1")
    local_rank, global_rank, world_size = torchrun_env(launch_hint=LAUNCH)
    device = device_for(local_rank)
    if not args.join and device.type == "cuda":
        # nccl matches collectives by their order alone: rank 0's barrier would be paired
        # with rank 1's gradient all-reduce of another size. That is undefined behaviour
        # (a hang, garbage, or a crash), not the clean timeout gloo gives.
        parser.error(
            "without --join this demo pairs a barrier with a gradient all-reduce, which "
            "nccl cannot detect (undefined behaviour); run it on the CPU with DDP_DEVICE=cpu"
        )
    # Joining waits, under the default timeout, for the last process to start.
    dist.init_process_group(
        backend=dist.get_default_backend_for_device(device),
        device_id=device if device.type == "cuda" else None,  # nccl: this GPU, connect now
    )
    # The short timeout, for training: DDP's collectives, Join's and the barrier run
    # on a group of every rank made with it (every rank calls new_group).
    group = dist.new_group(timeout=timedelta(seconds=args.timeout))

    model = DDP(
        regression_model(seed=0).to(device),
        device_ids=[device.index] if device.type == "cuda" else None,
        process_group=group,
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    # Uneven on purpose: rank r gets batches + r batches of its own samples.
    # Rank r's samples follow those of ranks 0..r-1: no two ranks share a sample.
    batches = [args.batches + rank for rank in range(world_size)]
    dataset = SyntheticRegression(size=BATCH_SIZE * sum(batches))
    my_batches = batches[global_rank]
    first = BATCH_SIZE * sum(batches[:global_rank])

    def train() -> int:
        steps = 0
        for step in range(my_batches):
            start = first + step * BATCH_SIZE
            source = dataset.inputs[start : start + BATCH_SIZE].to(device)
            targets = dataset.targets[start : start + BATCH_SIZE].to(device)
            optimizer.zero_grad()
            F.mse_loss(model(source), targets).backward()
            optimizer.step()
            steps += 1
        return steps

    started = time.perf_counter()
    try:
        if args.join:
            # Join needs every rank to enter the context; the last rank to run out of
            # batches ends it on every rank together.
            small = {}  # the all-reduces Join and DDP issue from Python
            with counting_all_reduce(small), Join([model]):
                steps = train()
                in_steps = small["calls"]
                log(f"ran {steps} steps; weights {weights_digest(model)} (inside Join)")
            # Leaving the context ran DDP's join hook: the last joiner's parameters
            # were broadcast to every rank.
            log(f"weights {weights_digest(model)} (after Join)")
            log(
                f"Join's small all-reduces: {in_steps} in {steps} forward passes "
                f"({in_steps / steps:g} per forward), {small['calls'] - in_steps} on leaving; "
                f"one element each: {small['elements'] == small['calls']}"
            )
        else:
            steps = train()
        log(f"ran {steps} steps; at the end-of-epoch barrier")
        dist.barrier(group=group)
    except RuntimeError as error:
        waited = time.perf_counter() - started
        reason = str(error).strip().splitlines()[0]
        log(f"stuck for {waited:.1f} s, then the {args.timeout:g} s timeout ended it: {reason}")
        sys.exit(1)

    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world_size)]
    dist.all_gather(gathered, flat, group=group)
    same = all(torch.equal(other, gathered[0]) for other in gathered)
    log(f"finished in {time.perf_counter() - started:.2f} s; models identical on all ranks: {same}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    end_process()  # not Python's teardown: see common.distributed.end_process
