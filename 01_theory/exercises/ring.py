"""Exercise 01 · ring: the ring all-reduce, on simulated ranks.

N ranks sit in a ring. Rank r sends only to rank (r + 1) % N, its right neighbour.
Each rank's tensor is cut into N chunks (`chunks[rank][c]` is rank's copy of chunk c;
`common.ring.chunk_bounds` makes the sizes differ by at most one element, and some are
empty when the tensor has fewer than N elements).

One *step* of the ring is one call of `pass_right(chunks, sending, add)`: at the same
moment, every rank r sends its chunk `sending[r]` to its right neighbour, which adds
it into its own copy of that chunk (`add=True`) or replaces its copy with it
(`add=False`).

Task: fill in `ring_all_reduce` so that afterwards every rank holds the sum of all
the ranks' tensors, moving data only with `pass_right`:

1. reduce-scatter: N-1 steps with `add=True`. Choose what each rank sends so that
   after them, rank r holds the *complete* sum of one chunk (which one is up to you,
   the lesson's choice is chunk (r + 1) % N);
2. all-gather: N-1 steps with `add=False`, passing the finished chunks around the
   ring until every rank has all of them.

Hint: in step `step` of the reduce-scatter, let rank r send chunk (r - step) % N: the
chunk it just received and added to (for step 0, its own). The lesson's figures show
the same steps. The check runs N = 1 to 5, with tensors whose size N does not divide
and tensors smaller than N, and counts the steps. (It swaps in its own copy of
`pass_right`, which also counts them: change only `ring_all_reduce`.)
"""

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

    # TODO: the reduce-scatter (N-1 calls of pass_right with add=True), then the
    # all-gather (N-1 calls with add=False). `sending` lists one chunk index per rank.
    raise NotImplementedError("ring_all_reduce: the two phases of the ring")

    return [torch.cat(row) for row in chunks]
