"""Lesson 04: two torchrun agents on one machine make one world of two nodes, with
node-by-node global ranks (static rendezvous here; c10d in the training tests);
multinode.py resumes on nodes that share no filesystem, and a node that resumed from
another epoch stops the job with a clear error."""

import re
import subprocess

import torch
from conftest import PYTHON, REPO

from common.launch import run, start
from common.ports import free_port

LESSON = REPO / "04_multinode"
NODE_REPORT = LESSON / "node_report.py"
MULTINODE = LESSON / "multinode.py"


def two_agents(commands, cwds, expect_failure=False):
    agents = [
        start(command, cwd=cwd, label=f"agent{i}", quiet=True)
        for i, (command, cwd) in enumerate(zip(commands, cwds, strict=True))
    ]
    return [agent.wait(120, expect_failure=expect_failure) for agent in agents]


def test_static_rendezvous_with_two_and_one_workers(tmp_path):
    static = f"--master_addr=127.0.0.1 --master_port={free_port()}"
    node0, node1 = two_agents(
        [
            f"torchrun --nnodes=2 --node_rank=0 --nproc_per_node=2 {static} {NODE_REPORT}",
            f"torchrun --nnodes=2 --node_rank=1 --nproc_per_node=1 {static} {NODE_REPORT}",
        ],
        [tmp_path, tmp_path],
    )
    # Global ranks node by node; local ranks from 0 on each node.
    assert "[rank0] host=" in node0 and "node_rank=0 local_rank=0 rank=0 world_size=3" in node0
    assert "node_rank=0 local_rank=1 rank=1 world_size=3" in node0
    assert "node_rank=1 local_rank=0 rank=2 world_size=3" in node1
    assert "[rank2]" not in node0 and "[rank0]" not in node1
    assert "all_reduce(SUM) of the ranks = 3 (expected 3)" in node0


def train(machines, total_epochs, expect_failure=False):
    c10d = f"--rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:{free_port()} --rdzv_id=test"
    command = f"torchrun --nnodes=2 --nproc_per_node=1 {c10d} {MULTINODE} {total_epochs} 1"
    return two_agents([command, command], machines, expect_failure=expect_failure)


def test_nodes_without_a_shared_filesystem_each_keep_a_snapshot(tmp_path):
    machines = [tmp_path / "a", tmp_path / "b"]
    for machine in machines:
        machine.mkdir()
    first = "".join(train(machines, 2))
    assert "is not shared: local rank 0 of every node saves a copy" in first
    resumed = train(machines, 3)
    for output in resumed:
        assert "resumed from snapshot.pt: 2 epochs done, continuing at epoch 2" in output
    snapshots = [torch.load(machine / "snapshot.pt", weights_only=True) for machine in machines]
    assert [snapshot["epochs_run"] for snapshot in snapshots] == [3, 3]
    for name, tensor in snapshots[0]["model"].items():
        assert torch.equal(tensor, snapshots[1]["model"][name])  # one model, two copies

    # One machine loses its copy: its rank starts at epoch 0, the other at 3.
    (machines[1] / "snapshot.pt").unlink()
    failed = "".join(train(machines, 5, expect_failure=True))
    errors = [line for line in failed.splitlines() if "different epochs" in line]
    assert len(errors) == 1, failed[-3000:]  # said once, by rank 0
    assert re.findall(r"rank (\d) on node \1: (\d)", errors[0]) in (
        [("0", "3"), ("1", "0")],  # rank 0 on the machine that kept its copy
        [("0", "0"), ("1", "3")],  # or on the one that lost it
    ), errors[0]
    assert "put --snapshot_path on a filesystem all nodes share" in errors[0]
    assert "epoch 3 |" not in failed  # it stopped before training, instead of hanging


def test_one_shared_folder_has_one_writer(tmp_path):
    # One node: every process sees the same folder, so global rank 0 alone saves.
    output = run(
        f"torchrun --standalone --nproc_per_node=2 {MULTINODE} 2 1", cwd=tmp_path, quiet=True
    )
    assert "is shared by all nodes: global rank 0 saves" in output
    saves = [line for line in output.splitlines() if "snapshot saved" in line]
    assert len(saves) == 2 and all(line.startswith("[rank0]") for line in saves), saves
    assert [path.name for path in tmp_path.iterdir()] == ["snapshot.pt"]  # no probe left


def test_plain_python_says_how_to_launch_it(tmp_path):
    result = subprocess.run([PYTHON, MULTINODE, "4", "2"], capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert "must be started by torchrun" in result.stderr
    assert "launch it as: torchrun --nnodes=2" in result.stderr


def test_bad_arguments_are_one_line():
    for script, args in ((MULTINODE, ["four", "2"]), (NODE_REPORT, ["--timeout", "-1"])):
        result = subprocess.run([PYTHON, script, *args], capture_output=True, text=True)
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1, result.stderr
        assert "launch it as: torchrun" in result.stderr
