"""Solution of exercise 00 · gather_pids (the task is in `../gather_pids.py`)."""

import os

import torch
import torch.distributed as dist


def gather_pids() -> list[int]:
    """The pid of every process in the group, indexed by rank (the same list on every
    rank). Runs inside a process group that is already initialized."""
    mine = torch.tensor([os.getpid()])
    world_size = dist.get_world_size()
    everyone = [torch.zeros_like(mine) for _ in range(world_size)]
    dist.all_gather(everyone, mine)  # every rank receives every rank's tensor
    return [int(pid) for pid in everyone]
