"""Lesson 04: where multinode.py's snapshots live, and which one every rank resumes from
(the newest any rank sees). Two torchrun agents here play two nodes, each in a folder of
its own (a disk of its own); one agent of two processes plays one node."""

import re

import pytest
import torch
from conftest import REPO, SCRIPTS, assert_same_tensors

from common.launch import run, start
from common.models import regression_model
from common.ports import free_port
from common.snapshot import save_atomic

MULTINODE = REPO / "04_multinode" / "multinode.py"
OUR_LINE = re.compile(r"^\[rank\d+\] .*$", re.MULTILINE)  # our log lines, not torch's
WORKER = re.compile(r"\[rank(\d+)\] pid=\d+ host=\S+ node=(\d+) ")


def two_nodes(folders, total_epochs, expect_failure=False) -> list[str]:
    """One agent per folder, one worker each; the outputs, in the order of `folders`."""
    c10d = f"--rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:{free_port()} --rdzv_id=test"
    command = f"torchrun --nnodes=2 --nproc_per_node=1 {c10d} {MULTINODE} {total_epochs} 2"
    agents = [start(command, cwd=f, label=f"node{i}", quiet=True) for i, f in enumerate(folders)]
    return [agent.wait(120, expect_failure=expect_failure) for agent in agents]


def worker(output: str) -> tuple[int, int]:
    """(global rank, node) of the one worker an agent started: c10d orders agents of one
    address by process id, which no test fixes."""
    [(rank, node)] = WORKER.findall(output)
    return int(rank), int(node)


def snapshot(folder) -> dict:
    return torch.load(folder / "snapshot.pt", weights_only=True)


def one_node(folder, total_epochs) -> str:
    """One agent of two processes (one node), in `folder`; its output."""
    command = f"torchrun --standalone --nproc_per_node=2 {MULTINODE} {total_epochs} 2"
    return run(command, cwd=folder, quiet=True)


def test_a_node_with_an_older_snapshot_resumes_from_the_newest(tmp_path):
    """(A node without one resumes from another's: lesson 04's check cell.)"""
    a, b, one = (tmp_path / name for name in ("a", "b", "one"))
    for folder in (a, b, one):
        folder.mkdir()

    # 6 epochs on one node of two processes: local rank 0 alone saves, only the snapshot.
    first = one_node(a, 6)
    assert "rank 0 (node 0): none, rank 1 (node 0): none; every rank starts from scratch" in first
    saves = [line for line in first.splitlines() if "snapshot saved" in line]
    assert len(saves) == 3 and all(line.startswith("[rank0]") for line in saves), saves
    assert [path.name for path in a.iterdir()] == ["snapshot.pt"]  # no temporary file

    # Node b came back with an older copy: 4 epochs, and weights that no run trained.
    older = snapshot(a)
    older["epochs_run"] = 4
    older["model"] = {name: tensor + 1 for name, tensor in older["model"].items()}
    save_atomic(older, b / "snapshot.pt")
    outputs = two_nodes([a, b], 8)
    rank, node = worker(outputs[0])  # every rank resumed from a's, and went on from there
    line = f"resumed from rank {rank}'s snapshot.pt (node {node}): 6 epochs done"
    assert [output.count(line) for output in outputs] == [1, 1], outputs
    text = "".join(outputs)
    assert f"every rank resumes from rank {rank}'s" in text
    assert "epoch 6 |" in text and "epoch 5 |" not in text
    assert [snapshot(folder)["epochs_run"] for folder in (a, b)] == [8, 8]
    assert_same_tensors(snapshot(a)["model"], snapshot(b)["model"])

    # The same 8 epochs in one go, on one node: the very same weights.
    one_node(one, 8)
    assert snapshot(one)["epochs_run"] == 8
    assert_same_tensors(snapshot(one)["model"], snapshot(a)["model"])
    # Each rank got its own random generators back: the states of the run in one go.
    resumed, expected = snapshot(a)["rng_state"], snapshot(one)["rng_state"]
    assert len(resumed) == len(expected) == 2
    for mine, theirs in zip(resumed, expected, strict=True):
        assert torch.equal(mine["cpu"], theirs["cpu"])


# What node b finds at its snapshot path, and what rank 0 then says of it for every rank
# (after "[rank0] rank R on node N: "; torch's reason for an unreadable file varies).
DAMAGED = {
    "truncated": r"snapshot snapshot\.pt cannot be read \(.*; delete snapshot\.pt to start "
    r"from scratch, or point the script at another snapshot path",
    "a folder": r"cannot keep snapshots at snapshot\.pt: it is a folder; point the script at a "
    r"snapshot path in a folder you can write",
}


@pytest.mark.parametrize("damage", sorted(DAMAGED))
def test_a_bad_snapshot_path_on_one_node_stops_every_rank_with_one_line(tmp_path, damage):
    a, b = tmp_path / "a", tmp_path / "b"
    state = {"model": {}, "optimizer": {}, "epochs_run": 4, "steps_run": 0, "loss_so_far": 0.0}
    state["rng_state"] = [{"cpu": torch.get_rng_state()}] * 2  # one per rank
    save_atomic(state, a / "snapshot.pt")
    good = (a / "snapshot.pt").read_bytes()
    b.mkdir()
    if damage == "truncated":
        (b / "snapshot.pt").write_bytes(good[:300])
    else:
        (b / "snapshot.pt").mkdir()  # where the snapshot file should go
    outputs = two_nodes([a, b], 6, expect_failure=True)  # both nodes exit non-zero
    rank, node = worker(outputs[1])  # the worker on the node with the damaged path
    lines = [line for output in outputs for line in OUR_LINE.findall(output)]
    said = [line for line in lines if "pid=" not in line]  # all but the start-up reports
    assert len(said) == 1, lines  # said once, by rank 0, for every rank, at start-up
    prefix = re.escape(f"[rank0] rank {rank} on node {node}: ")
    assert re.fullmatch(prefix + DAMAGED[damage], said[0]), said[0]
    # No agent was signalled to stop (stop_the_agent): with no restart to spend it stops
    # anyway, and would add its SignalException traceback.
    assert "SignalException" not in "".join(outputs), outputs
    assert list(a.iterdir()) == [a / "snapshot.pt"]  # nothing trained, nothing saved
    assert (a / "snapshot.pt").read_bytes() == good


def test_without_the_agreement_a_snapshot_claims_epochs_it_never_trained(tmp_path):
    """Each rank loading its own copy (lesson 03's way), node 0 without one: DDP gives
    rank 1 rank 0's fresh weights, and rank 1 counts on from its epoch 6 (static
    rendezvous, so that node 0 is the one without)."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    model = regression_model(seed=0)  # multinode.py's model and optimizer
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(1.0)  # unlike the fresh model that rank 0 starts from
    rng_state = [{"cpu": torch.get_rng_state()}] * 2  # one per rank
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epochs_run": 6}
    save_atomic(
        state | {"steps_run": 0, "loss_so_far": 0.0, "rng_state": rng_state}, b / "snapshot.pt"
    )
    static = f"--master_addr=127.0.0.1 --master_port={free_port()}"
    script = SCRIPTS / "multinode_own_copy_only.py"
    command = f"torchrun --nnodes=2 --nproc_per_node=1 {static} --node_rank={{n}} {script} 8 1"
    agents = [
        start(command.format(n=n), cwd=folder, label=f"node{n}", quiet=True)
        for n, folder in enumerate((a, b))
    ]
    node0 = agents[0].wait(120, expect_failure=True)
    node1 = agents[1].wait(120)

    assert "[rank1] resumed from rank 1's snapshot.pt (node 1): 6 epochs done" in node1
    assert "[rank0] epoch 1 |" in node0 and "[rank0] epoch 2 |" not in node0, node0[-3000:]
    assert "[rank0] training finished" not in node0
    # Its peer gone: "closed" or, when unread bytes were left, "reset" by peer.
    assert re.search(r"Connection (closed|reset) by peer", node0), node0[-3000:]
    trained_two, claims_eight = snapshot(a), snapshot(b)
    assert (trained_two["epochs_run"], claims_eight["epochs_run"]) == (2, 8)
    assert_same_tensors(trained_two["model"], claims_eight["model"])  # the same 2 epochs trained
