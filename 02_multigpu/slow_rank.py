"""Lesson 02: a slow rank, and the process group's timeout.

A collective waits for every rank. Here rank 1 is slow: before each of a series of
all_reduces it spends some seconds on "work" (a stand-in for a slow disk, a stuck
data loader, a debugger) while every other rank is already waiting in the all_reduce.
`--delays` gives rank 1's delay before each all_reduce, in order.

- a delay shorter than the timeout: the others simply wait, and the all_reduce
  succeeds;
- a delay longer than `--timeout`: the waiting ranks give up with an error naming the
  timeout, instead of hanging for ever. The default timeout depends on the backend
  (`torch.distributed.constants`: gloo's is longer than nccl's; lesson 02 prints
  both): set it with `init_process_group(timeout=...)` for every collective, or with
  `new_group(timeout=...)` for a group's. This script does the second: the timeout
  also bounds joining, where processes that start seconds apart on a busy machine
  would fail a short one before the lesson's all_reduces begin.

Launch it (from any folder, with the path to this file):

    torchrun --standalone --nproc_per_node=2 slow_rank.py --delays 1 --timeout 5
    torchrun --standalone --nproc_per_node=2 slow_rank.py --delays 1 30 --timeout 3

The second one waits 1 s in its first all_reduce, then fails, on purpose, 3 s into
its second.
"""

import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from common.cli import LessonArgumentParser, positive_seconds
from common.distributed import device_for, end_process, log, torchrun_env

LAUNCH = "torchrun --standalone --nproc_per_node=2 slow_rank.py --delays 1 30 --timeout 3"
SLOW_RANK = 1


def main() -> None:
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument(
        "--delays", type=float, nargs="+", default=[1.0, 30.0], help="rank 1's delays (s)"
    )
    parser.add_argument(
        "--timeout", type=positive_seconds, default=3.0, help="process group timeout (s)"
    )
    args = parser.parse_args()
    if min(args.delays) < 0:
        parser.error("--delays must be >= 0")
    local_rank, global_rank, world_size = torchrun_env(launch_hint=LAUNCH)
    if world_size < 2:
        parser.error("needs at least 2 processes: a rank to be slow and one to wait for it")

    device = device_for(local_rank)
    # Joining waits, under the default timeout, for the last process to start.
    dist.init_process_group(
        backend=dist.get_default_backend_for_device(device),
        device_id=device if device.type == "cuda" else None,  # nccl: this GPU, connect now
    )
    # The short timeout, for the all_reduces: a group of every rank, made with it (every
    # rank calls new_group). It bounds how long any collective of the group may wait.
    group = dist.new_group(timeout=timedelta(seconds=args.timeout))
    # Ranks leave new_group at different moments (a tenth of a second apart on a busy
    # machine): line them up, so that rank 1's delays are the only difference.
    dist.barrier(group=group)

    for number, delay in enumerate(args.delays, start=1):
        if global_rank == SLOW_RANK:
            log(f"working for {delay:g} s before all_reduce {number}")
            time.sleep(delay)  # the slow work itself, not a way to synchronize
        value = torch.ones(1, device=device)
        started = time.perf_counter()
        try:
            dist.all_reduce(value, group=group)
            # On the CPU, gloo's all_reduce returns with the sum. On a GPU, nccl's returns
            # once the work is queued on the GPU: .item() waits for the sum itself.
            total = value.item()
        except RuntimeError as error:  # gloo; on a GPU, nccl's watchdog ends the process
            waited = time.perf_counter() - started
            reason = str(error).strip().splitlines()[0]
            log(
                f"all_reduce {number} gave up after waiting {waited:.1f} s "
                f"(timeout {args.timeout:g} s): a rank did not join in time. {reason}"
            )
            sys.exit(1)  # no destroy_process_group: a peer is gone, it could block too
        waited = time.perf_counter() - started
        log(f"all_reduce {number} = {total:g} (expected {world_size}) after waiting {waited:.1f} s")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    end_process()  # not Python's teardown: see common.distributed.end_process
