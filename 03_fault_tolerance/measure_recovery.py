"""Lesson 03: what one failure costs, measured.

1. The time from a worker's death to training resumed, for several values of
   torchrun's `--monitor-interval` (how often the agent looks at its workers): death
   -> torchrun notices -> new workers are up -> they have loaded the snapshot -> the
   interrupted epoch is done.
2. The work lost per failure as a function of `save_every`: everything trained since
   the last snapshot is trained again.

Each run is killed from outside, as the out-of-memory killer would: rank 1 gets SIGKILL
as soon as rank 0 has logged the epoch before the one to interrupt.

Launch it (from any folder; it runs `multigpu_torchrun.py` with torchrun, 2 processes):

    python measure_recovery.py                 # about 3 minutes on 2 cores
    python measure_recovery.py --repeats 3 --intervals 0.1 5 --save_every   # table 1 only

Timestamps are taken when a line of output arrives (polled every 50 ms), so each
figure is good to about 0.1 s. The numbers depend on the machine and on its load:
they are reported, never asserted.
"""

import re
import statistics
import tempfile
import time
from pathlib import Path

import torch

from common.cli import LessonArgumentParser
from common.launch import CommandFailed, start
from common.notebook_device import choose
from common.snapshot import save_atomic

LAUNCH = "python measure_recovery.py [--repeats 1]"
SCRIPT = Path(__file__).resolve().parent / "multigpu_torchrun.py"
# The work-lost runs are killed in this epoch: late enough that every save_every up to
# it has written a snapshot before (else the restart starts from scratch).
CRASH_EPOCH = 19
EPOCH_LINE = re.compile(r"^\[rank0\] epoch (\d+) \| world", re.M)


def crash_run(
    folder: Path, epochs: int, save_every: int, crash_epoch: int, monitor_interval: float
) -> dict[str, float]:
    """One run killed early in `crash_epoch` and restarted; the seconds at which each
    event's line arrived, the seconds per epoch of the training before the kill (when it
    ran 3 or more), the epoch the kill interrupted and the epoch the restart resumed at."""
    command = (
        f"torchrun --standalone --nproc_per_node=2 --max-restarts=1 "
        f"--monitor-interval={monitor_interval} {SCRIPT} {epochs} {save_every} "
        f"--snapshot_path {folder / 'snapshot.pt'}"
    )
    run = start(command, cwd=folder, quiet=True)
    events = {}
    try:
        run.wait_for(r"epoch 1 \| world", timeout=300)
        begin = time.monotonic()
        run.wait_for(rf"epoch {crash_epoch - 1} \| world", timeout=300)
        if crash_epoch >= 3:  # epochs 2 .. crash_epoch - 1 ran undisturbed: time them
            events["seconds per epoch"] = (time.monotonic() - begin) / (crash_epoch - 2)
        run.kill_worker(1)  # SIGKILL, from outside
        events["died"] = time.monotonic()
        for name, pattern in (
            ("noticed", r"closing signal|failed \(exitcode"),
            ("workers up", r"restart=1"),
            ("resumed", r"resumed from"),
        ):
            run.wait_for(pattern, timeout=300)
            events[name] = time.monotonic()
        # The first epoch the killed attempt did not finish: its first line is the redo.
        killed = run.output[: run.output.index("restart=1")]
        events["killed in epoch"] = len(EPOCH_LINE.findall(killed))
        run.wait_for(rf"^\[rank0\] epoch {events['killed in epoch']} \| world", timeout=300)
        events["epoch redone"] = time.monotonic()
        output = run.wait(timeout=300)
    except CommandFailed:
        print(run.output[-3000:])  # what went wrong, since the run was quiet
        raise
    events["resumed at epoch"] = int(re.search(r"continuing at epoch (\d+)", output)[1])
    return events


def snapshot_write_seconds(folder: Path) -> float:
    """Median time of one atomic snapshot write of this lesson's model (with fsync)."""
    model = torch.nn.Linear(20, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model(torch.randn(4, 20)).sum().backward()
    optimizer.step()
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "epochs_run": 1,
        "rng_state": torch.get_rng_state(),
    }
    times = []
    for _ in range(20):
        begin = time.perf_counter()
        save_atomic(state, folder / "timing.pt")
        times.append(time.perf_counter() - begin)
    return statistics.median(times)


def restart_table(intervals: list[float], repeats: int) -> None:
    print(
        "\n1. From a worker's death to training resumed (median of "
        f"{repeats} run{'s' if repeats > 1 else ''}, seconds after the death)"
    )
    header = ("--monitor-interval", "noticed", "workers up", "resumed", "epoch redone")
    print("  ".join(f"{h:>18}" for h in header))
    for interval in intervals:
        rows = []
        for _ in range(repeats):
            with tempfile.TemporaryDirectory() as folder:
                events = crash_run(Path(folder), 4, 1, 2, interval)
            rows.append([events[h] - events["died"] for h in header[1:]])
        medians = [statistics.median(column) for column in zip(*rows, strict=True)]
        print("  ".join([f"{interval:>18g}", *(f"{m:>18.2f}" for m in medians)]))


def work_lost_table(save_everies: list[int]) -> None:
    runs = {}
    for save_every in save_everies:
        with tempfile.TemporaryDirectory() as folder:
            # Epochs to spare after the kill: it must land before training ends.
            runs[save_every] = crash_run(
                Path(folder), CRASH_EPOCH + 3, save_every, CRASH_EPOCH, 0.1
            )
    # Seconds per epoch: timed in these runs, before their crash.
    per_epoch = statistics.median(events["seconds per epoch"] for events in runs.values())
    with tempfile.TemporaryDirectory() as folder:
        write = snapshot_write_seconds(Path(folder))
    print(
        f"\n2. Work lost per failure (rank 1 killed once epoch {CRASH_EPOCH - 1} is logged; "
        f"{per_epoch:.3f} s per epoch; one snapshot write {write * 1000:.1f} ms; the steps "
        "of the killed epoch before the kill are not counted)"
    )
    header = (
        "save_every",
        "killed in",
        "resumed at",
        "epochs redone",
        "redone (s)",
        "restart (s)",
        "avg redone, random crash (epochs)",
    )
    print("  ".join(f"{h:>13}" for h in header))
    for save_every, events in runs.items():
        resumed_at, killed = events["resumed at epoch"], events["killed in epoch"]
        redone = killed - resumed_at
        restart = events["resumed"] - events["died"]
        # A crash at a uniformly random moment loses on average half an interval.
        print(
            "  ".join(
                [
                    f"{save_every:>13}",
                    f"{killed:>13}",
                    f"{resumed_at:>13}",
                    f"{redone:>13.2f}",
                    f"{redone * per_epoch:>13.2f}",
                    f"{restart:>13.2f}",
                    f"{save_every / 2:>13.1f}",
                ]
            )
        )


def main() -> None:
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument("--repeats", type=int, default=1, help="runs per monitor interval")
    parser.add_argument("--intervals", type=float, nargs="*", default=[0.1, 1.0, 5.0])
    parser.add_argument("--save_every", type=int, nargs="*", default=[1, 2, 5, 10])
    args = parser.parse_args()
    if any(not 1 <= save_every <= CRASH_EPOCH for save_every in args.save_every):
        parser.error(f"--save_every values must be between 1 and {CRASH_EPOCH}")
    print(f"torch {torch.__version__}; machine load matters: the figures are not asserted")
    choose(processes_per_machine=2)  # every run on one device
    if args.intervals:  # "--intervals" alone: skip this table
        restart_table(args.intervals, args.repeats)
    if args.save_every:
        work_lost_table(args.save_every)


if __name__ == "__main__":
    main()
