"""Lesson 03: elastic membership. One agent trains alone, a second joins and the
workers restart in a world of 2, then the first agent (rank 0) leaves: the second
goes on alone as the new rank 0, from the snapshot, to the end."""

import re

import torch
from conftest import REPO

from common.launch import kill_all, start
from common.ports import free_port

LESSON = REPO / "03_fault_tolerance"
EPOCHS = 200
WORKER = re.compile(r"pid=(\d+) rank=(\d+) local_rank=0 world_size=(\d+) restart=(\d+)")
RESUMED = re.compile(r"continuing at epoch (\d+)")


def agent_command(port: int) -> str:
    return (
        "torchrun --nnodes=1:2 --nproc_per_node=1 --max-restarts=3 --rdzv_backend=c10d "
        f"--rdzv_endpoint=127.0.0.1:{port} --rdzv_id=elastic --local-addr=127.0.0.1 "
        "--rdzv_conf=is_host=false,last_call_timeout=1,keep_alive_interval=2 "
        f"{LESSON / 'multigpu_torchrun.py'} {EPOCHS} 1"
    )


def test_an_agent_joins_then_rank_0_leaves_and_training_goes_on(tmp_path):
    port = free_port()
    env = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    try:
        store = start(f"python {LESSON / 'rendezvous_server.py'} {port}", quiet=True)
        store.wait_for("listening", timeout=60)
        first = start(agent_command(port), cwd=tmp_path, env=env, quiet=True)
        first.wait_for(r"epoch 1 \| world size 1", timeout=120)
        second = start(agent_command(port), cwd=tmp_path, env=env, quiet=True)
        second.wait_for(r"world_size=2", timeout=120)
        first.wait_for(r"epoch \d+ \| world size 2", timeout=120)
        first.kill()  # the agent of rank 0 leaves, with its worker
        second.wait_for(r"world_size=1 restart=1", timeout=120)
        output = second.wait(timeout=300)
    finally:
        kill_all()

    first_workers = WORKER.findall(first.output)
    second_workers = WORKER.findall(output)
    # The first agent's worker: rank 0 alone, then rank 0 of two (a new process).
    assert [(rank, world) for _, rank, world, _ in first_workers] == [("0", "1"), ("0", "2")]
    # The second agent's: rank 1 of two, then, after the restart, rank 0 alone.
    assert [(rank, world, restart) for _, rank, world, restart in second_workers] == [
        ("1", "2", "0"),
        ("0", "1", "1"),
    ]
    assert len({pid for pid, *_ in first_workers + second_workers}) == 4
    # Each new world resumed from the snapshot, never going back: the world of two
    # trained at least one epoch (waited for above) and saved it, so B resumed later.
    joined = int(RESUMED.findall(first.output)[0])
    left = int(RESUMED.findall(output)[-1])
    assert 2 <= joined < left < EPOCHS
    assert f"[rank0] epoch {joined} | world size 2" in first.output
    assert f"[rank0] epoch {left} | world size 1" in output
    assert f"[rank0] training finished: {EPOCHS} epochs" in output
    assert torch.load(tmp_path / "snapshot.pt", weights_only=True)["epochs_run"] == EPOCHS
