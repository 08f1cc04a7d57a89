"""Where one GPU per process cannot work, `device_for` says so in one line, on every
process, before CUDA does ("invalid device ordinal", nccl's "Duplicate GPU detected").
Each case fakes the machine's GPUs and torchrun's environment, also on a GPU machine."""

import pytest
import torch
from conftest import fake_cuda_gpus

from common import distributed

TOO_MANY = (
    "2 processes on this machine but 1 GPU(s), and each process needs a GPU of its "
    "own: start at most 1 (--nproc_per_node=1), or run on the CPU with DDP_DEVICE=cpu"
)
TWO_AGENTS = (
    "2 torchrun agents on this machine play 2 nodes, and each would put its local "
    "rank 0 on GPU 0: give each agent GPUs of its own (CUDA_VISIBLE_DEVICES=0 for "
    "one, =1 for the other...), or run on the CPU with DDP_DEVICE=cpu"
)
HERE = {"MASTER_ADDR": "127.0.0.1"}
TWO_HERE = {"LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "2"} | HERE
VIRTUAL = {"LOCAL_WORLD_SIZE": "4", "WORLD_SIZE": "4"} | HERE
AGENTS = {"GROUP_WORLD_SIZE": "2"} | HERE  # torchrun agents on this machine, playing nodes
AGENT_OF_2 = {"LOCAL_WORLD_SIZE": "1", "WORLD_SIZE": "2"} | AGENTS
NODE_OF_4 = {"LOCAL_WORLD_SIZE": "4", "WORLD_SIZE": "8"} | AGENTS | {"MASTER_ADDR": "node1"}

# id: (GPUs, torchrun's variables, local rank, the device it gets or the line it stops with)
CASES = {
    **{
        f"local rank {r} of 4 on 4 GPUs takes GPU {r}": (4, NODE_OF_4, r, f"cuda:{r}")
        for r in range(4)
    },
    # More processes than GPUs: both stop, the GPU's owner too.
    "2 processes, 1 GPU: local rank 0": (1, TWO_HERE, 0, TOO_MANY),
    "2 processes, 1 GPU: local rank 1": (1, TWO_HERE, 1, TOO_MANY),
    # mp.spawn sets no LOCAL_WORLD_SIZE: the process with no GPU left stops.
    "mp.spawn, 1 GPU: local rank 0": (1, {}, 0, "cuda:0"),
    "mp.spawn, 1 GPU: local rank 1": (1, {}, 1, TOO_MANY),
    # Node 0 and node 1 of 2 + 1 processes, on one machine's GPUs.
    "2 agents on 4 GPUs: the agent of 2": (4, AGENTS | {"LOCAL_WORLD_SIZE": "2"}, 0, TWO_AGENTS),
    "2 agents on 4 GPUs: the agent of 1": (4, AGENTS | {"LOCAL_WORLD_SIZE": "1"}, 0, TWO_AGENTS),
    "2 agents, each given a GPU": (2, AGENT_OF_2 | {"CUDA_VISIBLE_DEVICES": "1"}, 0, "cuda:0"),
    "2 agents on two machines": (2, AGENT_OF_2 | {"MASTER_ADDR": "node1"}, 0, "cuda:0"),
    "2 agents on the CPU": (2, AGENT_OF_2 | {"DDP_DEVICE": "cpu"}, 0, "cpu"),
    "GPUs left over": (8, TWO_HERE, 1, "cuda:1"),
    # torchrun --virtual-local-rank: LOCAL_RANK=0 in every worker, and a
    # CUDA_VISIBLE_DEVICES naming that worker's GPU (its first, its fourth), its only one.
    **{
        f"virtual local rank, GPU {gpu}": (1, VIRTUAL | {"CUDA_VISIBLE_DEVICES": gpu}, 0, "cuda:0")
        for gpu in ("0", "3")
    },
    # Without --virtual-local-rank the local rank 1 process has no GPU: it stops.
    "1 GPU set by hand for 2": (1, TWO_HERE | {"CUDA_VISIBLE_DEVICES": "0"}, 1, TOO_MANY),
}


@pytest.mark.parametrize("gpus, environment, local_rank, expected", CASES.values(), ids=CASES)
def test_each_process_gets_its_own_gpu_or_every_process_stops_with_one_line(
    gpus, environment, local_rank, expected, monkeypatch
):
    fake_cuda_gpus(monkeypatch, gpus)
    chosen = []  # the devices set_device was called with
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    names = ("DDP_DEVICE", "CUDA_VISIBLE_DEVICES", "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE")
    for name in names + ("WORLD_SIZE", "MASTER_ADDR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    if expected.startswith(("cuda", "cpu")):
        device = torch.device(expected)
        assert distributed.device_for(local_rank) == device
        assert chosen == ([device.index] if device.type == "cuda" else [])
    else:
        with pytest.raises(SystemExit) as stopped:
            distributed.device_for(local_rank)
        assert str(stopped.value) == expected
        assert chosen == []
