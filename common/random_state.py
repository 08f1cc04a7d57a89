"""Every rank's random number generators, saved in a snapshot and given back to each
rank on resume, so that anything random goes on as if nothing had stopped.

Introduced in 03_fault_tolerance; used by 03_fault_tolerance, 04_multinode and
05_mingpt.

Each process draws from generators of its own: the CPU's (a DataLoader's seed per
epoch, dropout and augmentation on the CPU) and, on a GPU, that GPU's CUDA generator
(dropout on the GPU). Ranks draw alike only while they make the very same calls;
dropout on different data, or augmentation seeded per rank, make their states differ.
A snapshot with rank 0's CPU state alone would hand rank 0's stream to every rank on
resume, and no GPU stream at all.
"""

import torch
import torch.distributed as dist

RandomState = dict[str, torch.Tensor]  # "cpu", and "cuda" on a GPU


def gather_random_states(device: torch.device) -> list[RandomState]:
    """Every rank's generator states, in rank order, on every rank. A collective: every
    rank calls it, so it goes *before* any `if rank == 0:` that writes the snapshot.

    Under nccl, `all_gather_object` sends its pickles from the current GPU, which
    `torch.cuda.set_device` has made this rank's own."""
    mine = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        mine["cuda"] = torch.cuda.get_rng_state(device)
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    return everyone


def restore_random_state(states: list[RandomState], device: torch.device) -> str | None:
    """Give this rank the generator states saved for its rank. When the snapshot comes
    from a world of another size, no rank's stream can go on exactly: nothing is
    restored and a one-line notice is returned, for the caller to print once."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if len(states) != world_size:
        return (
            f"the snapshot holds {len(states)} ranks' random states and this world has "
            f"{world_size} ranks: random draws (dropout, shuffling seeds) will not replay "
            "exactly"
        )
    # set_rng_state takes CPU byte tensors, whatever map_location the snapshot had.
    torch.set_rng_state(states[rank]["cpu"].cpu())
    if device.type == "cuda" and "cuda" in states[rank]:
        torch.cuda.set_rng_state(states[rank]["cuda"].cpu(), device)
    return None
