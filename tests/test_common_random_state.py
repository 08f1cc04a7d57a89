"""Snapshots give every rank its own random generators back (`common.random_state`), in
a gloo world of 2 whose ranks draw differently through dropout. tests/test_gpu_mode.py
runs `check_world` on the GPUs, where dropout draws from each GPU's CUDA generator."""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from conftest import spawn

from common.ports import free_port
from common.random_state import gather_random_states, restore_random_state


def draw(device: torch.device, count: int) -> torch.Tensor:
    """Random draws from the device's generator, as dropout on that device makes them."""
    return F.dropout(torch.ones(count, device=device), p=0.5)


def generator_state(device: torch.device) -> torch.Tensor:
    if device.type == "cuda":
        return torch.cuda.get_rng_state(device)
    return torch.get_rng_state()


def check_world(rank: int, world_size: int, port: int, device_type: str = "cpu") -> None:
    device = torch.device("cuda", rank) if device_type == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl" if device.type == "cuda" else "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        device_id=device if device.type == "cuda" else None,
    )
    try:
        torch.manual_seed(10 + rank)  # seeds every generator: ranks draw differently
        draw(device, 3)
        saved = gather_random_states(device)
        assert len(saved) == world_size
        assert torch.equal(saved[rank][device.type].cpu(), generator_state(device))
        if world_size > 1:
            assert not torch.equal(saved[0][device.type], saved[1][device.type])
        uninterrupted = draw(device, 64)  # what this rank draws next, had nothing stopped

        torch.manual_seed(999)  # a restarted process: every rank seeded alike
        assert not torch.equal(draw(device, 64), uninterrupted)  # not by chance
        torch.manual_seed(999)
        assert restore_random_state(saved, device) is None
        assert torch.equal(draw(device, 64), uninterrupted)  # its own stream, not rank 0's

        # A snapshot from a world of another size: nothing restored, one notice.
        torch.manual_seed(999)
        fresh = generator_state(device)
        notice = restore_random_state(saved[:1] * (world_size + 1), device)
        assert notice == (
            f"the snapshot holds {world_size + 1} ranks' random states and this world has "
            f"{world_size} ranks: random draws (dropout, shuffling seeds) will not replay exactly"
        )
        assert torch.equal(generator_state(device), fresh)
    finally:
        dist.destroy_process_group()


def test_each_rank_resumes_its_own_random_stream():
    spawn(check_world, 2, 2, free_port())
