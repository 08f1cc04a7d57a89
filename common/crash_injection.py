"""Failures on purpose: a worker that kills itself at a chosen rank, epoch and step.

Introduced in 03_fault_tolerance; used by 03_fault_tolerance and 04_multinode, whose
scripts take `--crash_rank R --crash_epoch E --crash_step S`. Each script decides
*when* its plan applies (lesson 03: torchrun's first attempt only; lesson 04: the
job's first attempt on any node); this module parses the plan, refuses one that can
never happen, and dies the way a real failure does.
"""

import argparse
import os
import signal

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
