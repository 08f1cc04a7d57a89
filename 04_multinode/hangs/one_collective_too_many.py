"""Lesson 04, part 2 (hangs): one rank calls one collective too many, and the job hangs.

Every rank runs the same training loop, but the last rank also all-reduces a metric
"for its log" after epoch 1. The others do not: they go on to the next epoch's
all_reduce, then to the barrier at the end. The extra call is matched with a call
meant for something else, the collectives drift out of step, and someone waits
forever for a partner that never comes. Three ways to see it, each with a short
timeout instead of gloo's default (`torch.distributed.constants.default_pg_timeout`):

    torchrun --standalone --nproc_per_node=2 one_collective_too_many.py --timeout 5
        # the hang, ended by the timeout: an error that names no culprit
    TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --standalone --nproc_per_node=2 \\
        one_collective_too_many.py --timeout 5
        # every collective is checked first: the mismatch is named, with both calls
    torchrun --standalone --nproc_per_node=2 one_collective_too_many.py --timeout 5 \\
        --monitored_barrier
        # rank 0 waits at a monitored barrier (half the timeout) that names the rank
        # that never came

`--fixed` removes the extra collective: the job then ends normally.
"""

from datetime import timedelta

import torch
import torch.distributed as dist
from hang_tools import add_hang_options

from common.cli import LessonArgumentParser
from common.distributed import end_process, log, log0, start_together, torchrun_env

LAUNCH = "torchrun --standalone --nproc_per_node=2 one_collective_too_many.py --timeout 5"
EPOCHS = 3


def main() -> None:
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    add_hang_options(parser, 5.0, "after each epoch", fixed="without the extra collective")
    args = parser.parse_args()
    _, global_rank, world_size = torchrun_env(launch_hint=LAUNCH)
    start_together(global_rank, world_size)  # so that a late start is not the timeout's
    dist.init_process_group(backend="gloo", timeout=timedelta(seconds=args.timeout))
    last = world_size - 1

    for epoch in range(EPOCHS):
        loss = torch.tensor([1.0 / (epoch + 1)])
        dist.all_reduce(loss)  # every rank: the epoch's loss, summed over ranks
        log0(f"epoch {epoch} | loss {loss.item() / world_size:.4f}")
        if epoch == 1 and global_rank == last and not args.fixed:
            log(f"epoch {epoch} | one more all_reduce, on rank {last} only")
            metric = torch.tensor([float(epoch), 1.0])  # (sum, count) of some metric
            dist.all_reduce(metric)  # the bug: no other rank makes this call
        if args.monitored_barrier:
            # Every rank checks in at the end of each epoch. Unlike barrier(), it
            # names the ranks that did not arrive (gloo only; slow, since rank 0
            # talks to every rank in turn: a tool for debugging, not for production).
            # Half the process group's timeout: it reports before the stuck collective's
            # own timeout ends the job, whichever rank the scheduler runs first.
            dist.monitored_barrier(timeout=timedelta(seconds=args.timeout / 2))

    dist.barrier()
    log(f"done, {EPOCHS} epochs")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    end_process()  # not Python's teardown: see common.distributed.end_process
