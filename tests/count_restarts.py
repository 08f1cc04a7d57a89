"""Count how often a restarted torchrun group fails to meet: the official series' command
with restarts, no TORCH_DISABLE_SHARE_RDZV_TCP_STORE, one worker SIGKILLed from outside.

Not collected by pytest (no test_ prefix): it launches dozens of jobs and takes minutes.

    .venv/bin/python tests/count_restarts.py            # 30 kills
    .venv/bin/python tests/count_restarts.py --kills 60 --limit 120
    .venv/bin/python tests/count_restarts.py --script old_multigpu_torchrun.py  # another

Each launch runs `torchrun --standalone --nproc_per_node=2 --max-restarts=3
03_fault_tolerance/multigpu_torchrun.py 8 1` in a folder of its own and kills rank 1 with
SIGKILL (`common.launch`'s `kill_worker`) at a moment that varies from launch to launch:
after rank 0 logs epoch 0, 1, ... 4, plus a random wait of up to one epoch. A launch
that has not ended within `--limit` seconds counts as hung (torchrun's shared store used
to leave a restarted gloo group waiting for the dead worker: lesson 03,
stale_address.py). Each launch that ends also has its final snapshot compared with a run
that was never killed: bit for bit, wherever the kill landed. The counts go into
docs/results.md ("Restarts after a kill"); it exits 1 unless every launch ended bit-equal.
"""

import argparse
import os
import random
import re
import sys
import tempfile
import time
from pathlib import Path

import torch

from common.launch import CommandFailed, CommandTimedOut, run, start
from course import results

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "03_fault_tolerance" / "multigpu_torchrun.py"
COMMAND = "torchrun --standalone --nproc_per_node=2 --max-restarts=3 {script} 8 1"


def equal_snapshots(a: Path, b: Path) -> bool:
    first, second = (torch.load(path, weights_only=True) for path in (a, b))
    return all(torch.equal(first["model"][k], second["model"][k]) for k in first["model"]) and (
        first["epochs_run"] == second["epochs_run"]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=30, help="launches, one kill each")
    parser.add_argument("--limit", type=float, default=90, help="seconds before a launch hangs")
    parser.add_argument("--seed", type=int, default=0, help="for the kill moments")
    parser.add_argument("--script", type=Path, default=SCRIPT, help="a version to compare")
    args = parser.parse_args()
    command = COMMAND.format(script=args.script.resolve())
    os.environ.pop("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", None)  # the official command's way
    moments = random.Random(args.seed)
    load = os.getloadavg()[0]
    print(f"load average {load:.2f} on {os.cpu_count()} cores", flush=True)
    started = time.monotonic()
    counts = {"met and finished": 0, "hung": 0, "failed": 0, "bit-equal": 0, "extra restarts": 0}
    with tempfile.TemporaryDirectory(prefix="count_restarts_") as folder:
        folder = Path(folder)
        run(f"{command} --snapshot_path {folder / 'clean.pt'}", quiet=True, timeout=args.limit)
        for kill in range(args.kills):
            after_epoch, extra = kill % 5, moments.uniform(0, 0.25)
            snapshot = folder / f"killed{kill}.pt"
            job = start(f"{command} --snapshot_path {snapshot}", quiet=True)
            began = time.monotonic()
            try:
                job.wait_for(rf"^\[rank0\] epoch {after_epoch} \|", timeout=args.limit)
                time.sleep(extra)
                job.kill_worker(1)
                output = job.wait(timeout=args.limit - (time.monotonic() - began))
            except CommandTimedOut:
                counts["hung"] += 1
                outcome = "HUNG"
            except (CommandFailed, RuntimeError) as error:
                counts["failed"] += 1
                outcome = f"FAILED: {str(error).splitlines()[0]}"
            else:
                counts["met and finished"] += 1
                restarts = max(int(n) for n in re.findall(r"restart=(\d+)", output))
                counts["extra restarts"] += restarts > 1
                equal = equal_snapshots(folder / "clean.pt", snapshot)
                counts["bit-equal"] += equal
                outcome = f"restarts {restarts}, bit-equal {equal}"
            seconds = time.monotonic() - began
            print(
                f"kill {kill + 1:>3}: after epoch {after_epoch} + {extra:.2f} s: {outcome} "
                f"({seconds:.1f} s)",
                flush=True,
            )
    summary = f"{args.kills} kills: " + ", ".join(f"{name} {n}" for name, n in counts.items())
    print(summary)
    script = args.script.resolve()
    results.record(
        "restarts",
        [script.relative_to(REPO).as_posix() if script.is_relative_to(REPO) else script.name,
         results.commit(), results.today(), summary, f"{time.monotonic() - started:.0f} s",
         f"{load:.2f} on {os.cpu_count()} cores"],
    )  # fmt: skip
    sys.exit(0 if counts["bit-equal"] == args.kills else 1)


if __name__ == "__main__":
    main()
