"""Lesson 03: bad snapshots and bad launches of its scripts get one line. (Crash, restart
and resume: the notebook's check cell, on its own runs.)"""

import os
import subprocess

import pytest
import torch
import torch.distributed as dist
from conftest import PYTHON, REPO, one_worker_environment

from common.ports import free_port

SCRIPT = REPO / "03_fault_tolerance" / "multigpu_torchrun.py"
PREEMPTIBLE = REPO / "03_fault_tolerance" / "multigpu_preemptible.py"  # part 3's
STALE_ADDRESS = REPO / "03_fault_tolerance" / "stale_address.py"
# What each script's snapshot holds.
KEYS = {
    SCRIPT: "model, optimizer, epochs_run, rng_state",
    PREEMPTIBLE: "model, optimizer, epochs_run, steps_run, loss_so_far, rng_state",
}


def one_worker(tmp_path, *arguments, script=SCRIPT, env=None):
    """The script as the one worker of a world of one, as torchrun would start it."""
    environment = {**os.environ, **one_worker_environment(), **(env or {})}
    return subprocess.run(
        [PYTHON, script, *arguments],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=environment,
        timeout=120,  # a worker waiting for a store that nobody starts fails the test
    )


# One kind of bad file per script: every SnapshotError takes the same path through it (each
# kind's message: tests/test_common_snapshot.py); this one names the keys the script needs.
@pytest.mark.parametrize("script", [SCRIPT, PREEMPTIBLE], ids=["part1", "part3"])
def test_a_bad_snapshot_gets_one_line_naming_the_file(script, tmp_path):
    path = tmp_path / "runs" / "bad.pt"
    path.parent.mkdir()
    torch.save({"state_dict": {"weight": torch.ones(1, 20)}}, path)
    before = path.read_bytes()
    result = one_worker(tmp_path, "2", "1", "--snapshot_path", str(path), script=script)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert len(lines) == 2, lines  # the worker's start line, then the one error line
    said = f"{path} is not a snapshot of this script (it has no {KEYS[script]}); delete {path}"
    assert lines[1].startswith("[rank0] ") and said in lines[1]
    assert "Traceback" not in result.stderr  # no pickle traceback
    assert path.read_bytes() == before  # and the file is left for the learner to inspect


# What a worker of agent 2 of 2 sees, sharing torchrun's store, with restarts possible.
SHARED_WITH_RESTARTS = {
    "GROUP_WORLD_SIZE": "2",
    "TORCHELASTIC_USE_AGENT_STORE": "True",
    "TORCHELASTIC_MAX_RESTARTS": "3",
}


@pytest.mark.parametrize("script", [SCRIPT, PREEMPTIBLE], ids=["part1", "part3"])
def test_restarts_of_several_agents_on_the_shared_store_are_refused_in_one_line(tmp_path, script):
    """Agents of several nodes count restarts apart, so a prefix per count could split the
    workers: the worker stops with the fix before it joins anything (no store listens)."""
    result = one_worker(tmp_path, "2", "1", script=script, env=SHARED_WITH_RESTARTS)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1:] == [
        f"{script.name}: restarts of a job of 2 torchrun agents need a store of each "
        "attempt's own; launch it as: TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun "
        f"--standalone --nproc_per_node=2 {script.name} 20 5"
    ], result.stderr


def test_a_snapshot_path_under_a_file_is_refused_in_one_line_before_training(tmp_path):
    """As agent 2 of 2 without restarts, on the agent's store (this test's): the worker
    joins, publishing rank 0's address under the attempt's prefix, then refuses the path."""
    (tmp_path / "runs").write_text("a file where the snapshot's folder should be")
    port = free_port()
    agent_store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    no_restarts = SHARED_WITH_RESTARTS | {
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "MASTER_PORT": str(port),
    }
    result = one_worker(tmp_path, "2", "1", "--snapshot_path", "runs/snapshot.pt", env=no_restarts)
    assert result.returncode == 1
    assert result.stdout.splitlines()[1:] == [
        "[rank0] cannot keep snapshots at runs/snapshot.pt: runs is a file; point the script "
        "at a snapshot path in a folder you can write"
    ]  # at start-up, not at the first save
    assert "Traceback" not in result.stderr
    published = agent_store
    for prefix in ("attempt0", "0/", "cpu/", "0"):
        published = dist.PrefixStore(prefix, published)
    assert published.check(["0"])


def test_stale_address_without_a_restart_to_show_refuses_in_one_line(tmp_path):
    """Without --max-restarts, as one of 2 workers: it reads only torchrun's variables,
    the same on every rank, and refuses before the first meeting (no store listens)."""
    no_restarts = dict(
        WORLD_SIZE="2", TORCHELASTIC_RESTART_COUNT="0", TORCHELASTIC_MAX_RESTARTS="0"
    )
    result = one_worker(tmp_path, script=STALE_ADDRESS, env=no_restarts)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""  # nothing of attempt 0
    assert result.stderr.splitlines() == [
        "stale_address.py: it needs 2 processes and a restart (--nproc_per_node=2 "
        "--max-restarts=1), not 2 process(es) and --max-restarts=0; launch it as: "
        "torchrun --standalone --nproc_per_node=2 --max-restarts=1 stale_address.py"
    ]
