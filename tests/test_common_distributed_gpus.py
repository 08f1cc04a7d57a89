"""Where one GPU per process cannot work, `device_for` says so in one line, on every
process, before CUDA does (with "invalid device ordinal" on some processes, or nccl's
"Duplicate GPU detected").

No GPU here: each test fakes a machine with a number of GPUs (`torch.accelerator`'s
`current_accelerator` and `device_count`, `torch.cuda.set_device`), and torchrun's
environment, also on a GPU machine. On a real GPU only the fitting case has run (one
process on one GPU, through the GPU mode: docs/gpus.md).
"""

import pytest
import torch
from conftest import fake_cuda_gpus

from common import distributed


@pytest.fixture
def machine(monkeypatch):
    """`machine(gpus, **environment)`: fake `gpus` CUDA GPUs and torchrun's variables;
    returns the list of devices `set_device` was called with."""
    chosen = []

    def fake(gpus: int, **environment: str) -> list[int]:
        fake_cuda_gpus(monkeypatch, gpus)
        monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
        names = ("DDP_DEVICE", "CUDA_VISIBLE_DEVICES", "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE")
        for name in names + ("WORLD_SIZE", "MASTER_ADDR"):
            monkeypatch.delenv(name, raising=False)
        for name, value in environment.items():
            monkeypatch.setenv(name, value)
        return chosen

    return fake


def test_each_process_takes_the_gpu_of_its_local_rank(machine):
    chosen = machine(
        4, LOCAL_WORLD_SIZE="4", WORLD_SIZE="8", GROUP_WORLD_SIZE="2", MASTER_ADDR="node1"
    )
    assert [distributed.device_for(rank) for rank in range(4)] == [
        torch.device("cuda", rank) for rank in range(4)
    ]
    assert chosen == [0, 1, 2, 3]


@pytest.mark.parametrize("local_rank", [0, 1])  # both stop: the GPU owner too
def test_more_processes_than_gpus_stop_every_process_with_one_line(machine, local_rank):
    chosen = machine(1, LOCAL_WORLD_SIZE="2", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1")
    with pytest.raises(SystemExit) as stopped:
        distributed.device_for(local_rank)
    assert str(stopped.value) == (
        "2 processes on this machine but 1 GPU(s), and each process needs a GPU of its "
        "own: start at most 1 (--nproc_per_node=1), or run on the CPU with DDP_DEVICE=cpu"
    )
    assert chosen == []


def test_under_mp_spawn_the_local_rank_is_what_counts(machine):
    """mp.spawn sets no LOCAL_WORLD_SIZE: the process with no GPU left stops."""
    chosen = machine(1)
    assert distributed.device_for(0) == torch.device("cuda", 0)
    with pytest.raises(SystemExit, match=r"^2 processes on this machine but 1 GPU\(s\)"):
        distributed.device_for(1)
    assert chosen == [0]


@pytest.mark.parametrize("local_world_size", ["2", "1"])  # node 0 and node 1 of 2 + 1
def test_two_agents_on_one_machine_without_gpus_of_their_own_stop(machine, local_world_size):
    chosen = machine(
        4,
        LOCAL_WORLD_SIZE=local_world_size,
        WORLD_SIZE="3",
        GROUP_WORLD_SIZE="2",
        MASTER_ADDR="127.0.0.1",
    )
    with pytest.raises(SystemExit) as stopped:
        distributed.device_for(0)
    assert str(stopped.value) == (
        "2 torchrun agents on this machine play 2 nodes, and each would put its local "
        "rank 0 on GPU 0: give each agent GPUs of its own (CUDA_VISIBLE_DEVICES=0 for "
        "one, =1 for the other...), or run on the CPU with DDP_DEVICE=cpu"
    )
    assert chosen == []


@pytest.mark.parametrize(
    "environment",
    [
        {"CUDA_VISIBLE_DEVICES": "1"},  # each agent was given a GPU of its own
        {"MASTER_ADDR": "node1"},  # two real machines
        {"DDP_DEVICE": "cpu"},  # the simulated nodes run on the CPU
    ],
)
def test_two_agents_are_fine_with_gpus_of_their_own_or_on_two_machines(machine, environment):
    setting = {"LOCAL_WORLD_SIZE": "1", "WORLD_SIZE": "2", "GROUP_WORLD_SIZE": "2"}
    setting["MASTER_ADDR"] = "127.0.0.1"
    machine(2, **(setting | environment))
    expected = "cpu" if "DDP_DEVICE" in environment else "cuda"
    assert distributed.device_for(0).type == expected


def test_gpus_left_over_are_fine(machine):
    chosen = machine(8, LOCAL_WORLD_SIZE="2", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1")
    assert distributed.device_for(1) == torch.device("cuda", 1)
    assert chosen == [1]


@pytest.mark.parametrize("visible", ["0", "3"])  # the agent's first and fourth GPU
def test_virtual_local_rank_each_worker_sees_its_own_gpu(machine, visible):
    """torchrun --virtual-local-rank: LOCAL_RANK=0 in every worker, and a
    CUDA_VISIBLE_DEVICES naming that worker's GPU, which it sees as its only one."""
    chosen = machine(
        1,
        LOCAL_WORLD_SIZE="4",
        WORLD_SIZE="4",
        MASTER_ADDR="127.0.0.1",
        CUDA_VISIBLE_DEVICES=visible,
    )
    assert distributed.device_for(0) == torch.device("cuda", 0)
    assert chosen == [0]


def test_one_gpu_set_by_hand_for_two_processes_still_stops(machine):
    """Without --virtual-local-rank the local rank 1 process has no GPU: it stops."""
    chosen = machine(
        1, LOCAL_WORLD_SIZE="2", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", CUDA_VISIBLE_DEVICES="0"
    )
    with pytest.raises(SystemExit, match=r"^2 processes on this machine but 1 GPU\(s\)"):
        distributed.device_for(1)
    assert chosen == []
