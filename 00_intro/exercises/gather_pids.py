"""Exercise 00 · gather_pids: an all_gather in a real 2-process world.

`all_reduce` gives every rank the *sum* of what each contributed. `all_gather` gives
every rank *the list* of what each contributed, in rank order: the process with rank
r puts its tensor into a list of world_size tensors, and afterwards every process's
list holds rank 0's tensor, then rank 1's, and so on.

Task: write `gather_pids` so that every process returns the process ids (`os.getpid()`)
of all the processes of the group, indexed by rank. Each process knows only its own
pid, so the others must come over the wire.

The check (`exercises.check("00_intro", "gather_pids")` in the notebook) starts a group
of 2 processes on this machine (gloo), calls `gather_pids()` on both, and
compares what each returned with the real pids, in rank order (it starts rank 1 first,
so the pids in rank order are usually not in increasing order). Hint: make one tensor per rank with
`torch.zeros_like(mine)`, and call `dist.all_gather(list_of_tensors, mine)`.
"""

import os

import torch
import torch.distributed as dist


def gather_pids() -> list[int]:
    """The pid of every process in the group, indexed by rank (the same list on every
    rank). Runs inside a process group that is already initialized."""
    mine = torch.tensor([os.getpid()])
    world_size = dist.get_world_size()
    # TODO: gather `mine` from all world_size ranks, then return the pids as a list of ints.
    raise NotImplementedError(f"gather_pids: gather {mine} from {world_size} ranks")
