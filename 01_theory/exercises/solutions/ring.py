"""Solution of exercise 01 · ring (the task is in `../ring.py`)."""

import torch

from common.ring import chunk_bounds


def pass_right(chunks: list[list[torch.Tensor]], sending: list[int], add: bool) -> None:
    """One step: rank r sends its chunk `sending[r]` to rank (r + 1) % N, all at once."""
    world_size = len(chunks)
    # Every message leaves before any arrives: copy what is sent first.
    messages = [
        (rank, sending[rank], chunks[rank][sending[rank]].clone()) for rank in range(world_size)
    ]
    for sender, chunk, values in messages:
        receiver = (sender + 1) % world_size
        if add:
            chunks[receiver][chunk] = chunks[receiver][chunk] + values
        else:
            chunks[receiver][chunk] = values


def ring_all_reduce(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """`tensors[rank]` is rank's flat tensor (all of the same size). Return each rank's
    tensor after the all-reduce: the sum of them all, computed the ring's way."""
    world_size = len(tensors)
    bounds = chunk_bounds(tensors[0].numel(), world_size)
    chunks = [[t[bounds[c] : bounds[c + 1]].clone() for c in range(world_size)] for t in tensors]

    # Reduce-scatter: rank r passes on the chunk it summed one step earlier. After N-1
    # steps, rank r holds the full sum of chunk (r + 1) % N.
    for step in range(world_size - 1):
        sending = [(rank - step) % world_size for rank in range(world_size)]
        pass_right(chunks, sending, add=True)
    # All-gather: each rank passes on the finished chunk it received one step earlier
    # (for step 0, the one it finished itself).
    for step in range(world_size - 1):
        sending = [(rank + 1 - step) % world_size for rank in range(world_size)]
        pass_right(chunks, sending, add=False)

    return [torch.cat(row) for row in chunks]
