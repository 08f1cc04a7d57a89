"""Exercise 03 · stop_agreement: every rank stops at the same step.

A cluster asks a job to stop by sending a signal (SIGTERM, or SIGUSR1 some minutes
before a time limit). The ranks receive it at different moments, and sometimes only
some of them do. A handler notes it in a flag; at every step the training loop asks:
should *we* stop? If a rank answered from its own flag alone, it would stop and save
while the others went on to the next step's all-reduce and waited for it, for the
whole process-group timeout.

Task: write `all_ranks_agree_to_stop(asked)`. `asked` says whether *this* rank was
asked to stop. Return True on every rank, at the same call, as soon as *any* rank has
been asked; False on every rank while none has. One collective on a small tensor does
it (lesson 01's `all_reduce` has the operation you need).

The check runs it in a world of 3 processes for 8 steps: rank 1 is asked from step 3
on, rank 2 from step 5 on, rank 0 never. Every rank must answer False at steps 0 to 2
and True from step 3 on. (`03_fault_tolerance/multigpu_preemptible.py` holds the course's
own version: try without reading it first.)
"""

import torch  # noqa: F401 (you will need it)
import torch.distributed as dist  # noqa: F401 (and this)


def all_ranks_agree_to_stop(asked: bool) -> bool:
    """True on every rank if any rank was asked to stop. Every rank calls it at every
    step (it is a collective); the process group is already initialized, on the CPU."""
    # TODO: put this rank's flag in a tensor, combine the flags of all ranks, and
    # return the result as a bool.
    raise NotImplementedError("all_ranks_agree_to_stop: combine every rank's flag")
