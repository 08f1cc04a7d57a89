"""Snapshots give every rank its own random generators back (`common.random_state`),
in a real gloo world of 2 CPU processes whose ranks draw different numbers.

The CUDA half (`torch.cuda.get_rng_state` per GPU) was not run here: no GPU.
"""

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from common.ports import free_port
from common.random_state import gather_random_states, restore_random_state

CPU = torch.device("cpu")


def check_world(rank: int, world_size: int, port: int) -> None:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size
    )
    try:
        torch.manual_seed(10 + rank)  # ranks draw differently, as with dropout per rank
        torch.rand(3)
        saved = gather_random_states(CPU)
        assert len(saved) == world_size
        assert torch.equal(saved[rank]["cpu"], torch.get_rng_state())
        assert not torch.equal(saved[0]["cpu"], saved[1]["cpu"])
        uninterrupted = torch.rand(5)  # what this rank draws next, had nothing stopped

        torch.manual_seed(999)  # a restarted process: every rank seeded alike
        assert restore_random_state(saved, CPU) is None
        assert torch.equal(torch.rand(5), uninterrupted)  # its own stream, not rank 0's

        # A snapshot from a world of another size: nothing restored, one notice.
        torch.manual_seed(999)
        fresh = torch.get_rng_state()
        notice = restore_random_state(saved[:1], CPU)
        assert notice == (
            f"the snapshot holds 1 ranks' random states and this world has {world_size} "
            "ranks: random draws (dropout, shuffling seeds) will not replay exactly"
        )
        assert torch.equal(torch.get_rng_state(), fresh)
    finally:
        dist.destroy_process_group()


def test_each_rank_resumes_its_own_random_stream(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    mp.spawn(check_world, args=(2, free_port()), nprocs=2, join=True)
