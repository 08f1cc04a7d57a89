"""Failures on purpose: a worker that kills itself at a chosen rank, epoch and step.

Used by 05_mingpt, whose `main.py` takes `--crash_rank R --crash_epoch E --crash_step S`
(lessons 03 and 04 kill a worker from outside instead: `common.launch`'s `kill_worker`).
This module parses the plan, refuses one that can never happen, and dies the way a real
failure does. A plan applies once per job, not again after torchrun restarts the group:
lesson 05, which may run on several nodes, takes the job's count from every rank
(`restarts_of_the_job`).
"""

import argparse
import os
import signal

import torch
import torch.distributed as dist

from common.cli import LessonArgumentParser, natural_int
from common.distributed import log, log0

CrashPlan = tuple[int, int, int]  # (global rank, epoch, step)


def add_crash_arguments(parser: LessonArgumentParser) -> None:
    crash = parser.add_argument_group("failure injection (once per job: not after a restart)")
    crash.add_argument("--crash_epoch", type=natural_int, help="epoch at which a worker dies")
    crash.add_argument("--crash_step", type=natural_int, default=0, help="step of that epoch")
    crash.add_argument("--crash_rank", type=natural_int, default=0, help="global rank that dies")


def crash_plan(args: argparse.Namespace) -> CrashPlan | None:
    if args.crash_epoch is None:
        return None
    return (args.crash_rank, args.crash_epoch, args.crash_step)


def check_crash_plan(crash_at: CrashPlan | None, epochs: int, steps: int, launch: str) -> None:
    """A crash that can never happen would let a demonstration pass for the wrong reason:
    one line on rank 0, and every rank exits with code 2 before training."""
    if crash_at is None:
        return
    rank, epoch, step = crash_at
    for name, value, limit in (
        ("--crash_rank", rank, dist.get_world_size()),
        ("--crash_epoch", epoch, epochs),
        ("--crash_step", step, steps),
    ):
        if value >= limit:
            log0(f"{name} {value} never happens: it must be below {limit}; launch it as: {launch}")
            dist.destroy_process_group()
            raise SystemExit(2)


def die_now(epoch: int, step: int) -> None:
    log(f"injected failure: pid {os.getpid()} kills itself at epoch {epoch} step {step}")
    # SIGKILL, like the out-of-memory killer: no exception, no clean-up, no goodbye.
    os.kill(os.getpid(), signal.SIGKILL)


def restarts_of_the_job(device: torch.device) -> int:
    """How often the group has restarted, on any node (0 on the job's first attempt).
    A collective: every rank calls it.

    TORCHELASTIC_RESTART_COUNT is per agent: it counts the restarts that the failures of
    *this node's* workers caused. When another node's worker dies, this node's agent
    restarts its workers too, and if they were still healthy when it noticed (it sees a
    new rendezvous round, not a failure), their count stays 0. A crash keyed on "count
    0" alone would then fire again wherever its rank lands on such a node (c10d can
    number the nodes differently after a restart). The job has restarted if any agent
    has: take the largest count over all ranks.
    """
    count = torch.tensor([int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))], device=device)
    dist.all_reduce(count, op=dist.ReduceOp.MAX)
    return int(count.item())
