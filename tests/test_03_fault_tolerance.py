"""Lesson 03: without --max-restarts the job fails; a relaunch resumes at the first
unfinished epoch; bad snapshots and bad launches get one line. (That a crashed and
restarted run ends exactly where an uninterrupted one does, the notebook's own check
cell asserts.)"""

import os
import re
import subprocess

import pytest
import torch
from conftest import PYTHON, REPO

from common.launch import run
from common.ports import free_port
from common.snapshot import save_atomic

SCRIPT = REPO / "03_fault_tolerance" / "multigpu_torchrun.py"
TORCHRUN = "torchrun --standalone --nproc_per_node=2"
EPOCHS, SAVE_EVERY = 6, 2
CRASH = "--crash_rank 1 --crash_epoch 3 --crash_step 5"  # the snapshot before it: epoch 1


def epochs_trained(output: str) -> list[int]:
    return [int(epoch) for epoch in re.findall(r"\[rank0\] epoch (\d+) \| world size", output)]


def test_without_max_restarts_the_job_fails_and_a_relaunch_resumes_where_it_stopped(tmp_path):
    output = run(
        f"{TORCHRUN} {SCRIPT} {EPOCHS} {SAVE_EVERY} {CRASH}",
        cwd=tmp_path,
        quiet=True,
        expect_failure=True,
    )
    assert "restart=1" not in output and "training finished" not in output
    # torchrun's report lists both ranks: rank 1, killed by SIGKILL, and rank 0, which
    # it stopped or which failed first on its own, having lost its peer mid all-reduce.
    # Which of the two it calls the "Root Cause" is a race (it orders the failures by
    # the time it learns of them), so the test only asks that both be there.
    assert "Failures:" in output, output[-3000:]  # torchrun's report, at the end
    report = output[output.index("Failures:") :]
    assert "Root Cause (first observed failure)" in report
    entries = report.split("rank      : ")[1:]
    rank1 = [entry for entry in entries if entry.startswith("1 (local_rank: 1)")]
    rank0 = [entry for entry in entries if entry.startswith("0 (local_rank: 0)")]
    assert len(rank1) == 1 and len(rank0) == 1, report
    assert "Signal 9 (SIGKILL) received by PID" in rank1[0]
    # The snapshot it left is whole: the one written after epoch 1.
    assert torch.load(tmp_path / "snapshot.pt", weights_only=True)["epochs_run"] == 2

    # Launched again by hand, the job starts at the first unfinished epoch, 2: not at
    # epoch 1 again (the reference series' resume), not at 0.
    output = run(f"{TORCHRUN} {SCRIPT} {EPOCHS} {SAVE_EVERY}", cwd=tmp_path, quiet=True)
    assert "[rank0] resumed from snapshot.pt: 2 epochs done, continuing at epoch 2" in output
    assert epochs_trained(output) == [2, 3, 4, 5]
    assert torch.load(tmp_path / "snapshot.pt", weights_only=True)["epochs_run"] == EPOCHS


def one_worker(tmp_path, *arguments):
    """The script as the one worker of a world of one, with the environment torchrun
    would give it (cheaper than starting torchrun's agent too)."""
    environment = {
        **os.environ,
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
    return subprocess.run(
        [PYTHON, SCRIPT, *arguments], capture_output=True, text=True, cwd=tmp_path, env=environment
    )


def foreign_checkpoint(path):
    torch.save({"state_dict": {"weight": torch.ones(1, 20)}}, path)


def truncated_snapshot(path):
    save_atomic({"model": {"weight": torch.ones(1000)}, "epochs_run": 1}, path)
    path.write_bytes(path.read_bytes()[:300])


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda path: path.touch(), "snapshot {path} is empty; delete {path} to start"),
        (truncated_snapshot, "snapshot {path} cannot be read ("),
        (
            foreign_checkpoint,
            "{path} is not a snapshot of this script (it has no model, optimizer, "
            "epochs_run, rng_state); delete {path}",
        ),
    ],
    ids=["empty", "truncated", "foreign"],
)
def test_a_bad_snapshot_gets_one_line_naming_the_file(make, message, tmp_path):
    path = tmp_path / "runs" / "bad.pt"
    path.parent.mkdir()
    make(path)
    before = path.read_bytes()
    result = one_worker(tmp_path, "2", "1", "--snapshot_path", str(path))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert len(lines) == 2, lines  # the worker's start line, then the one error line
    assert lines[1].startswith("[rank0] ") and message.format(path=path) in lines[1]
    assert "Traceback" not in result.stderr  # no pickle traceback
    assert path.read_bytes() == before  # and the file is left for the learner to inspect


def test_a_crash_that_can_never_happen_is_refused(tmp_path):
    result = one_worker(tmp_path, "4", "2", "--crash_rank", "1", "--crash_epoch", "1")
    assert result.returncode == 2
    assert result.stdout.splitlines()[1:] == [
        "[rank0] --crash_rank 1 never happens: it must be below 1; launch it as: "
        "torchrun --standalone --nproc_per_node=2 multigpu_torchrun.py 20 5"
    ]  # refused before any training
    assert not (tmp_path / "snapshot.pt").exists()
