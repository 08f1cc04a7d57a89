"""Lesson 03: a crashed and restarted run ends exactly where an uninterrupted one does;
without --max-restarts the job fails; a relaunch resumes at the first unfinished epoch;
bad snapshots and bad launches get one line."""

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
# Restarted workers get a store of their own: torchrun's shared one can hand them the
# addresses of the workers they replace (see the notebook).
FRESH_STORE = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def epochs_trained(output: str) -> list[int]:
    return [int(epoch) for epoch in re.findall(r"\[rank0\] epoch (\d+) \| world size", output)]


def assert_same(expected, actual, where="snapshot"):
    """Equal to the last bit: tensors with torch.equal, everything else with ==."""
    assert type(expected) is type(actual), where
    if isinstance(expected, torch.Tensor):
        assert torch.equal(expected, actual), where
    elif isinstance(expected, dict):
        assert expected.keys() == actual.keys(), where
        for key in expected:
            assert_same(expected[key], actual[key], f"{where}[{key!r}]")
    elif isinstance(expected, list | tuple):
        assert len(expected) == len(actual), where
        for index, (left, right) in enumerate(zip(expected, actual, strict=True)):
            assert_same(left, right, f"{where}[{index}]")
    else:
        assert expected == actual, where


def test_a_crash_and_restart_ends_with_the_uninterrupted_weights(tmp_path):
    clean, crashed = tmp_path / "clean", tmp_path / "crashed"
    clean.mkdir(), crashed.mkdir()
    output = run(f"{TORCHRUN} {SCRIPT} {EPOCHS} {SAVE_EVERY}", cwd=clean, quiet=True)
    assert epochs_trained(output) == list(range(EPOCHS))
    output = run(
        f"torchrun --standalone --nproc_per_node=2 --max-restarts=1 {SCRIPT} "
        f"{EPOCHS} {SAVE_EVERY} {CRASH}",
        cwd=crashed,
        env=FRESH_STORE,
        quiet=True,
    )
    assert "[rank1] injected failure: pid" in output and "at epoch 3 step 5" in output
    # torchrun saw the group fail (its first failure: rank 1's SIGKILL, -9, or rank 0's
    # end on losing its peer, an error or an abort in gloo, whichever it learned of
    # first) ...
    assert re.search(r"failed \(exitcode: -?\d+\) local_rank: [01]", output)
    for rank in (0, 1):  # ... and started both workers again
        assert f"rank={rank} local_rank={rank} world_size=2 restart=1" in output
        assert f"[rank{rank}] resumed from snapshot.pt: 2 epochs done, continuing at epoch 2" in (
            output
        )
    # Epochs 0-2 ran before the crash (epoch 3 died mid-way); the restart picks up at
    # epoch 2, the first one the snapshot does not hold.
    assert epochs_trained(output) == [0, 1, 2, 2, 3, 4, 5]

    expected = torch.load(clean / "snapshot.pt", weights_only=True)
    actual = torch.load(crashed / "snapshot.pt", weights_only=True)
    assert actual["epochs_run"] == EPOCHS
    assert actual["optimizer"]["state"][0]["momentum_buffer"].abs().sum() > 0
    # Model, optimizer (momentum), epochs run and random state: all bit for bit.
    assert_same(expected, actual)


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


def test_plain_python_says_how_to_launch_it(tmp_path):
    result = subprocess.run(
        [PYTHON, SCRIPT, "4", "2"], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert "multigpu_torchrun.py must be started by torchrun" in result.stderr
    assert "launch it as: torchrun --standalone --nproc_per_node=2" in result.stderr


def test_bad_arguments_are_one_line(tmp_path):
    result = subprocess.run(
        [PYTHON, SCRIPT, "4", "0"], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "argument save_every: '0' is not a positive integer; launch it as" in result.stderr


def test_a_crash_that_can_never_happen_is_refused(tmp_path):
    result = one_worker(tmp_path, "4", "2", "--crash_rank", "1", "--crash_epoch", "1")
    assert result.returncode == 2
    assert result.stdout.splitlines()[1:] == [
        "[rank0] --crash_rank 1 never happens: it must be below 1; launch it as: "
        "torchrun --standalone --nproc_per_node=2 multigpu_torchrun.py 20 5"
    ]  # refused before any training
    assert not (tmp_path / "snapshot.pt").exists()
