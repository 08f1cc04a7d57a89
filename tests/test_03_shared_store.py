"""Lesson 03: torchrun's shared store (its agents lend their workers their rendezvous
store) fails an elastic join with the DistStoreError the elastic notebook quotes, and
TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 gives `stale_address.py`'s restart a store of its own."""

import re

import torch.distributed as dist
from conftest import REPO

from common.launch import run, start
from common.ports import free_port

LESSON = REPO / "03_fault_tolerance"


def test_a_join_without_the_variable_fails_both_agents_with_the_quoted_error(tmp_path):
    """B waits for the new round's rank 0 to publish its address, which A never does."""
    port = free_port()
    agent = (
        "torchrun --nnodes=1:2 --nproc_per_node=1 --max-restarts=3 --rdzv_backend=c10d "
        f"--rdzv_endpoint=127.0.0.1:{port} --rdzv_id=elastic --local-addr=127.0.0.1 "
        "--rdzv_conf=is_host=false,last_call_timeout=1,keep_alive_interval=2,read_timeout=5 "
        # Far more epochs than the test lasts: A is still training whenever B arrives.
        f"{LESSON / 'multigpu_torchrun.py'} 100000 1000 --snapshot_path {tmp_path / 'job.pt'}"
    )
    # The rendezvous store, served by a thread of this process while the object lives.
    _server = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    agent_a = start(agent, cwd=tmp_path, label="A", quiet=True)
    agent_a.wait_for(r"epoch 1 \| world size 1", timeout=120)
    agent_b = start(agent, cwd=tmp_path, label="B", quiet=True)
    joined = agent_b.wait(timeout=120, expect_failure=True)
    running = agent_a.wait(timeout=120, expect_failure=True)

    # The key names the round B joins: 1, or later if a round started over. Round 0 is
    # A's own start, whose address A did publish.
    quoted = re.search(
        r"torch\.distributed\.DistStoreError: wait timeout after 5000ms, "
        r"keys: /torch\.rendezvous\.elastic\.(\d+)/MASTER_ADDR",
        joined,
    )
    assert quoted and int(quoted[1]) >= 1, joined[-3000:]
    assert "world size 2" not in joined + running  # the world of two never trained
    assert "DistStoreError: wait timeout after 5000ms" in running, running[-3000:]


def test_with_the_variable_the_restarted_group_meets_in_a_store_of_its_own(tmp_path):
    script = LESSON / "stale_address.py"
    command = f"torchrun --standalone --nproc_per_node=2 --max-restarts=1 {script}"
    fresh_store = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    output = run(command, cwd=tmp_path, env=fresh_store, timeout=120, quiet=True)
    assert "[rank1] attempt 0: killing myself" in output  # the restart happened
    assert "[rank0] attempt 1: this attempt has a store of its own" in output
    assert "[rank0] attempt 1: met" in output and "[rank1] attempt 1: met" in output
    assert "already in the store" not in output
