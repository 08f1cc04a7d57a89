"""Lesson 04, part 2: the classic hangs of a DDP job, each reproduced on 2 processes.

A small data-parallel training loop (gloo, CPU) with one bug or accident chosen by
`--case`:

    rank0_only   rank 0 saves a snapshot, then calls barrier() inside `if rank == 0:`
    order        the ranks all-reduce two statistics, each rank in its own order
    data_loader  reading one sample never returns on the last rank (a dead file server)
    killed_rank  the last rank is killed (SIGKILL): its connections close at once
    frozen_rank  the last rank stops (SIGSTOP) with its connections open: a frozen node,
                 or one cut off the network, looks like this to the others

The others wait in a collective until the process group's `--timeout` (3 s below,
instead of gloo's default, `torch.distributed.constants.default_pg_timeout`), but for
killed_rank: that one they notice at once. Launch it from this folder (or with the path
to this file); each command exits non-zero, on purpose:

    torchrun --standalone --nproc_per_node=2 classic_hangs.py --case rank0_only --timeout 3
    torchrun --standalone --nproc_per_node=2 classic_hangs.py --case order --timeout 3
    torchrun --standalone --nproc_per_node=2 classic_hangs.py --case data_loader --timeout 3
    torchrun --standalone --nproc_per_node=2 classic_hangs.py --case killed_rank --timeout 3
    torchrun --standalone --nproc_per_node=2 classic_hangs.py --case frozen_rank --timeout 3

(frozen_rank: torchrun waits 30 s for the stopped rank to end on SIGTERM, then kills it.)
The tools that find the rank and the call, all run by the lesson's notebook:

    TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --standalone --nproc_per_node=2 \\
        classic_hangs.py --case order --timeout 3      # names both mismatched calls
    torchrun --standalone --nproc_per_node=2 classic_hangs.py --case data_loader \\
        --timeout 3 --monitored_barrier                # names the rank that never came
    kill -USR2 PID          # while it hangs: that rank prints every thread's stack
    py-spy dump --pid PID   # the same, read from outside the process
    mkdir -p /tmp/fr && TORCH_FR_DUMP_TEMP_FILE=/tmp/fr/rank_ torchrun --standalone \\
        --nproc_per_node=2 classic_hangs.py --case order --timeout 3  # a record per rank
    torchfrtrace /tmp/fr    # PyTorch's reader of the records (see the notebook for gloo's)

Every rank prints its PID first. `--fixed` runs rank0_only and order with the bug fixed;
they then end normally.
"""

import faulthandler
import os
import signal
import threading
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from hang_tools import add_hang_options
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from common.cli import LessonArgumentParser
from common.distributed import end_process, job_store, log, log0, start_together, torchrun_env

LAUNCH = "torchrun --standalone --nproc_per_node=2 classic_hangs.py --case order --timeout 3"
CASES = ("rank0_only", "order", "data_loader", "killed_rank", "frozen_rank")
SAMPLES, BATCH, STEPS = 16, 2, 4
BUG_STEP = 1  # every case goes wrong after this step; the hang comes in the next one
RECORD_WAIT = 3.0  # seconds a rank that timed out waits for the others' flight records


class Samples(Dataset):
    """SAMPLES numbers. Reading sample `never_returns` blocks for ever, as a read from a
    network filesystem whose server went away does."""

    def __init__(self, never_returns: int | None = None):
        self.never_returns = never_returns

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == self.never_returns:
            log(f"reading sample {index}: this read never returns")
            threading.Event().wait()  # nothing ever sets it
        return torch.tensor([index / SAMPLES])


def statistics_in_order(loss: torch.Tensor, batch: torch.Tensor, rank: int, fixed: bool):
    """The step's statistics, in the order this rank all-reduces them. The bug: the
    order differs per rank, as when it comes from a dict filled in the order a rank's
    own data arrived, or from a set of names (its order changes with each process's
    hash seed). The fix: one order on every rank (sorted names)."""
    statistics = {"histogram": torch.histc(batch, bins=4, min=0, max=1), "loss": loss.detach()}
    names = sorted(statistics, reverse=(rank == 0 and not fixed))
    return [(name, statistics[name].reshape(-1)) for name in names]


def average_gradients(model: torch.nn.Module, world_size: int) -> None:
    """What DDP does inside backward(), written out: every gradient summed over the
    ranks, then divided by their number. (Not DDP itself: with gloo, building a DDP
    model under TORCH_DISTRIBUTED_DEBUG=DETAIL crashes with SIGSEGV in PyTorch 2.11 to
    2.14, hang_tools.MEASURED; the lesson's notebook checks yours.)"""
    for parameter in model.parameters():
        dist.all_reduce(parameter.grad)
        parameter.grad /= world_size


def dump_flight_record(rank: int, world_size: int) -> None:
    """Write this rank's flight record to $TORCH_FR_DUMP_TEMP_FILE<rank>, the file name
    nccl's watchdog uses on a timeout; with gloo no watchdog does it, so we do. Then
    wait (RECORD_WAIT seconds at most) until every rank has written its own: torchrun
    stops every worker as soon as one fails, and a rank still writing would be cut
    short. (nccl's watchdog waits TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC for the same.)"""
    prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE")
    if not prefix:
        return
    # The recorder's contents, pickled: a private function (for nccl's, PyTorch's Flight
    # Recorder tutorial calls its twin, _dump_nccl_trace).
    Path(f"{prefix}{rank}").write_bytes(torch._C._distributed_c10d._dump_fr_trace())
    log(f"flight record written to {prefix}{rank}")
    store = job_store(RECORD_WAIT)  # torchrun's, which every worker can reach
    store.set(f"flight_record_{rank}", "written")
    try:
        store.wait([f"flight_record_{other}" for other in range(world_size)])
    except dist.DistStoreError:  # a rank stuck outside any collective, or dead
        log("not every rank wrote a flight record")


def train(args, rank: int, world_size: int) -> None:
    last = world_size - 1
    dataset = Samples()
    sampler = DistributedSampler(dataset, shuffle=False)
    if args.case == "data_loader" and rank == last:
        dataset.never_returns = list(sampler)[(BUG_STEP + 1) * BATCH]
    loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler)
    torch.manual_seed(0)  # the same initial weights on every rank
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    for step, batch in enumerate(loader):
        if step == STEPS:
            break
        if args.monitored_barrier:
            # Every rank checks in once its batch is loaded; rank 0 names the ranks
            # that do not come. Half the process group's timeout, so that it reports
            # before a stuck collective's own timeout ends the job.
            dist.monitored_barrier(timeout=timedelta(seconds=args.timeout / 2))
        loss = (model(batch) - batch).square().mean()
        loss.backward()
        average_gradients(model, world_size)
        optimizer.step()
        optimizer.zero_grad()
        log0(f"step {step} | rank 0's loss {loss.item():.4f}")
        if step != BUG_STEP:
            continue

        if args.case == "rank0_only" and rank == 0:
            log(f"step {step} | snapshot saved; barrier() so that the others wait for it")
            if not args.fixed:
                dist.barrier()  # the bug: no other rank comes here
        if args.case == "rank0_only" and args.fixed:
            dist.barrier()  # the fix: every rank waits, outside the `if rank == 0:`
        if args.case == "order":
            ordered = statistics_in_order(loss, batch, rank, args.fixed)
            log(f"step {step} | all-reducing {', '.join(name for name, _ in ordered)}")
            for _, value in ordered:
                dist.all_reduce(value)
        if args.case == "killed_rank" and rank == last:
            log(f"step {step} | killed (SIGKILL)")
            os.kill(os.getpid(), signal.SIGKILL)
        if args.case == "frozen_rank" and rank == last:
            log(f"step {step} | frozen (SIGSTOP), connections still open")
            os.kill(os.getpid(), signal.SIGSTOP)


def main() -> None:
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument("--case", choices=CASES, required=True, help="which hang")
    add_hang_options(parser, 3.0, "at each step", fixed="rank0_only, order: without the bug")
    args = parser.parse_args()
    if args.fixed and args.case not in ("rank0_only", "order"):
        parser.error("--fixed is for rank0_only and order, whose bug is in the code")
    _, rank, world_size = torchrun_env(launch_hint=LAUNCH)

    # `kill -USR2 PID` makes this process print the Python stack of every thread, even
    # while its main thread is blocked inside a collective (the dump is written by C
    # code in the signal handler, not by Python code that would wait for the GIL).
    faulthandler.register(signal.SIGUSR2, all_threads=True)
    # gloo on purpose, on GPU machines too: monitored_barrier is gloo's alone, and the
    # timeout below is a Python error only with gloo (nccl's watchdog aborts instead).
    start_together(rank, world_size)  # so that a late start is not the timeout's
    dist.init_process_group(backend="gloo", timeout=timedelta(seconds=args.timeout))
    log(f"pid {os.getpid()} | case {args.case} | process-group timeout {args.timeout:g} s")
    try:
        train(args, rank, world_size)
    except RuntimeError as error:  # the timeout, a closed connection, a detected mismatch
        log(f"{type(error).__name__}: {str(error).strip().splitlines()[0]}")
        dump_flight_record(rank, world_size)
        end_process(1)
    dist.barrier()
    log(f"done, {STEPS} steps")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    end_process()  # not Python's teardown: see common.distributed.end_process
