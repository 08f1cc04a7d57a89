"""Lesson 03, part 3: a job asked to stop (SIGTERM or SIGUSR1) stops at one step on
every rank, saves that step, exits with the resumable code, and its resume equals the
run that was never stopped; an error that no restart can fix spends no restart."""

import os
import re
import signal

import torch
from conftest import REPO

from common.launch import start
from common.preemption import RESUMABLE_EXIT_CODE

SCRIPT = REPO / "03_fault_tolerance" / "multigpu_torchrun.py"
JOB = f"torchrun --standalone --nproc_per_node=2 {SCRIPT} 6 3 --batch_size 8"
STOP = r"^\[rank(\d)\] epoch (\d+) \| stop agreed before step (\d+) \| signal here: (.+)$"
LOSS = r"^\[rank0\] epoch (\d+) \| world size .* loss (\S+)$"


def weights(folder):
    return torch.load(folder / "snapshot.pt", weights_only=True)["model"]


def equal_weights(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)


def stops(output):
    """{rank: (epoch, step, signal it received)} from every rank's stop line."""
    return {int(r): (int(e), int(s), sig) for r, e, s, sig in re.findall(STOP, output, re.M)}


def test_stopped_at_one_step_on_every_rank_and_resumed_exactly(tmp_path):
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    straight.mkdir(), stopped.mkdir()
    uninterrupted = start(JOB, cwd=straight, quiet=True).wait(120)

    job = start(JOB, cwd=stopped, quiet=True)
    job.wait_for(r"^\[rank0\] epoch 1 \|", timeout=120)  # epoch 2 is under way
    job.send_signal(signal.SIGTERM)  # to the torchrun agent, as Slurm and Kubernetes do
    output = job.wait(120, expect_failure=True)  # torchrun exits 1 after a signal
    assert "Received 15 death signal, shutting down workers" in output  # it forwarded it
    where = stops(output)
    assert where.keys() == {0, 1}, output
    assert where[0][:2] == where[1][:2], where  # the same epoch and step on both ranks
    epoch, step = where[0][:2]
    snapshot = torch.load(stopped / "snapshot.pt", weights_only=True)
    assert (snapshot["epochs_run"], snapshot["steps_run"]) == (epoch, step)

    resumed = start(JOB, cwd=stopped, quiet=True).wait(120)
    assert f"continuing at epoch {epoch} step {step}" in resumed
    assert equal_weights(weights(stopped), weights(straight))  # bit for bit
    # The stopped epoch's loss, printed by the resumed run, is the uninterrupted one's.
    expected = dict(re.findall(LOSS, uninterrupted, re.M))
    assert dict(re.findall(LOSS, resumed, re.M))[str(epoch)] == expected[str(epoch)]


def test_a_signal_that_reaches_one_rank_stops_every_rank_with_the_resumable_code(tmp_path):
    # Only rank 1 is told (torchrun is not): rank 0 learns it from the all-reduce. With
    # no restart allowed, torchrun's report shows the workers' exit code.
    job = start(JOB, cwd=tmp_path, quiet=True)
    rank1 = int(re.search(r"pid=(\d+) rank=1 ", job.wait_for(r"pid=\d+ rank=1 ", 120))[1])
    job.wait_for(r"^\[rank0\] epoch 0 \|", timeout=120)
    os.kill(rank1, signal.SIGUSR1)
    output = job.wait(120, expect_failure=True)
    where = stops(output)
    assert where[1][2] == "SIGUSR1" and where[0][2] == "none (another rank did)", where
    assert where[0][:2] == where[1][:2], where
    codes = {int(code) for code in re.findall(r"exitcode\s*:\s*(-?\d+)", output)}
    assert codes == {RESUMABLE_EXIT_CODE}, output


def test_a_bad_snapshot_spends_no_restart(tmp_path):
    (tmp_path / "snapshot.pt").touch()  # empty: every attempt would meet it
    job = start(JOB.replace("torchrun ", "torchrun --max-restarts=3 "), cwd=tmp_path, quiet=True)
    output = job.wait(120, expect_failure=True)
    said = re.findall(r"^\[rank\d\] snapshot snapshot.pt is empty; .*$", output, re.M)
    assert len(said) == 2, output  # once per rank: the first attempt, and no other
    assert "restart=1" not in output and "will restart worker group" not in output
    assert "Received 15 death signal, shutting down workers" in output
