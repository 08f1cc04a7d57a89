"""Solution of exercise 03 · stop_agreement (the task is in `../stop_agreement.py`)."""

import torch
import torch.distributed as dist


def all_ranks_agree_to_stop(asked: bool) -> bool:
    """True on every rank if any rank was asked to stop. Every rank calls it at every
    step (it is a collective); the process group is already initialized, on the CPU."""
    flag = torch.tensor([int(asked)])
    # MAX over the ranks: 1 as soon as one rank holds 1. (SUM > 0 works too; MIN, or
    # SUM == world size, would wait until *every* rank was asked, which may never come.)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())
