"""Ring all-reduce, written by hand over torch.distributed point-to-point messages.

Introduced in 01_theory (`ring_allreduce.py` checks it against `dist.all_reduce` and
benchmarks the two); `common.ring_sim` is the same algorithm simulated in one process,
step by step, for the figures.

N processes sit in a ring; each sends only to its right neighbour and receives only
from its left one. The tensor is cut into N chunks (sizes differ by at most one
element; some are empty when the tensor has fewer than N elements).

1. Reduce-scatter, N-1 steps: in step s, rank r sends chunk (r - s) mod N to the
   right and adds the chunk (r - s - 1) mod N that arrives from the left into its own
   copy. Afterwards rank r holds the full sum of chunk (r + 1) mod N.
2. All-gather, N-1 steps: in step s, rank r sends chunk (r + 1 - s) mod N (complete)
   to the right and stores chunk (r - s) mod N from the left. Afterwards every rank
   holds every summed chunk.

Each rank sends 2(N-1) chunks of n/N elements: 2(N-1)/N of the tensor, under 2 however
large N grows.
Sending everything to one rank and broadcasting back costs that rank (N-1) whole
tensors each way instead.

What makes it fast (measured in 01_theory, with the slow version kept below for the
comparison):
- each step sends and receives together, as one batch (`dist.batch_isend_irecv`): the
  link to the right and the link from the left carry data *at the same time*, on gloo
  and on nccl alike (`_start_exchange` says why a batch);
- on the CPU, each chunk travels in pieces of `PIECE_BYTES`, all posted at once, and
  a piece that has arrived is added in while the next ones are still on the wire.
  Measured on a 2-core machine at 64 MB with 2 processes (median of 15): 0.76-0.81x
  of `dist.all_reduce` in whole chunks (2 runs), 0.90-0.96x in 1 MB pieces (5 runs);
  with 4 processes sharing the 2 cores, no difference beyond the noise. (Sending
  piece k of a step as soon as piece k of the step before is in, a deeper pipeline,
  measured no better.) nccl cuts its messages into slices itself, so on a GPU each
  chunk goes whole;
- nothing is allocated per call: chunks are views of the caller's tensor, the sum is
  added in place into it, and the receive buffer is kept between calls. A big
  fresh buffer comes straight from the operating system (glibc maps every buffer
  above a threshold that tops out at 32 MB) and each of its pages faults on first
  touch, on every call;
- no `.clone()`, no `torch.cat`: the all-gather receives straight into the output.
"""

import torch
import torch.distributed as dist

# The size of the pieces a chunk travels in on the CPU (`ring_allreduce.py --piece-size 0`
# shows the ring without them).
PIECE_BYTES = 1 << 20  # 1 MB

# One receive buffer per device and dtype, grown when needed and kept between calls.
_receive_buffers: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}


def chunk_bounds(numel: int, world_size: int) -> list[int]:
    """Where each of the `world_size` chunks starts (and the last one ends): sizes
    differ by at most one element, the first `numel % world_size` chunks get the extra
    one, and chunks are empty when `numel < world_size`."""
    base, extra = divmod(numel, world_size)
    bounds = [0]
    for index in range(world_size):
        bounds.append(bounds[-1] + base + (1 if index < extra else 0))
    return bounds


def _receive_buffer(numel: int, like: torch.Tensor) -> torch.Tensor:
    key = (like.device, like.dtype)
    buffer = _receive_buffers.get(key)
    if buffer is None or buffer.numel() < numel:
        buffer = torch.empty(numel, dtype=like.dtype, device=like.device)
        _receive_buffers[key] = buffer
    return buffer[:numel]


def _start_exchange(outgoing: torch.Tensor, incoming: torch.Tensor, right: int, left: int):
    """Start sending `outgoing` to the right neighbour and receiving `incoming` from the
    left one, as one batch (`dist.batch_isend_irecv`); returns the requests to wait on.
    An empty piece is neither sent nor received: nothing of it travels.

    One batch per exchange, not every receive posted up front: nccl matches
    point-to-point messages by their order between two ranks, not by tag, and runs
    ungrouped ones one after another on one stream. With 2 ranks, left == right: rank
    0's stream would hold [receive][send] and so would rank 1's, each receive waiting
    for a send queued behind the other's. In a batch, nccl starts both together
    (ncclGroupStart/End). Batches queued one after another are matched in order too.

    nccl also asks that the *first* batch of a group involve every rank, because it
    creates the communicator; a rank whose pieces are all empty posts nothing. The
    lesson scripts pass `device_id` to `init_process_group` on GPUs, which creates the
    communicator there and then."""
    operations = []
    if incoming.numel():
        operations.append(dist.P2POp(dist.irecv, incoming, left))
    if outgoing.numel():
        operations.append(dist.P2POp(dist.isend, outgoing, right))
    return dist.batch_isend_irecv(operations) if operations else []


def _wait(requests) -> None:
    for request in requests:
        request.wait()


def ring_all_reduce(tensor: torch.Tensor, piece_bytes: int = PIECE_BYTES) -> int:
    """Sum `tensor` over every rank of the default process group, in place, with a
    ring. On the CPU each chunk travels in pieces of at most `piece_bytes` (0: whole
    chunks). Returns the number of bytes this rank sent (for the traffic check)."""
    world_size, rank = dist.get_world_size(), dist.get_rank()
    if world_size == 1 or tensor.numel() == 0:
        return 0
    # A non-contiguous tensor has no flat view: work on a contiguous copy.
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.contiguous().view(-1)
    bounds = chunk_bounds(flat.numel(), world_size)
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    # Every rank cuts every chunk into the same number of pieces (tensor_split: sizes
    # differ by at most one element), so each piece sent has a receive of its size.
    pieces_per_chunk = 1
    if flat.device.type == "cpu" and piece_bytes > 0:
        per_piece = max(1, piece_bytes // flat.element_size())  # elements
        pieces_per_chunk = max(1, -(-bounds[1] // per_piece))  # the largest chunk's, rounded up

    def pieces(index: int) -> tuple[torch.Tensor, ...]:
        index %= world_size
        return torch.tensor_split(flat[bounds[index] : bounds[index + 1]], pieces_per_chunk)

    bytes_sent = 0
    # Reduce-scatter: send one chunk while the left neighbour's arrives, and add each
    # piece of it in as soon as it is there.
    for step in range(world_size - 1):
        outgoing = pieces(rank - step)  # for step > 0: the chunk summed one step ago
        target = pieces(rank - step - 1)
        buffer = _receive_buffer(sum(piece.numel() for piece in target), flat)
        arrived = torch.tensor_split(buffer, pieces_per_chunk)
        in_flight = [
            _start_exchange(o, a, right, left) for o, a in zip(outgoing, arrived, strict=True)
        ]
        for requests, piece, into in zip(in_flight, arrived, target, strict=True):
            _wait(requests)
            into.add_(piece)  # in place, into the caller's tensor, while the rest travels
        bytes_sent += sum(piece.numel() for piece in outgoing) * flat.element_size()

    # All-gather: the summed chunks land straight in their place in the output.
    for step in range(world_size - 1):
        outgoing = pieces(rank + 1 - step)  # for step > 0: the chunk received one step ago
        incoming = pieces(rank - step)
        in_flight = [
            _start_exchange(o, i, right, left) for o, i in zip(outgoing, incoming, strict=True)
        ]
        for requests in in_flight:
            _wait(requests)
        bytes_sent += sum(piece.numel() for piece in outgoing) * flat.element_size()

    if not tensor.is_contiguous():
        tensor.copy_(flat.view_as(tensor))
    return bytes_sent


def ring_all_reduce_straightforward(tensor: torch.Tensor) -> int:
    """The first version one writes: correct, and half as fast or worse on big tensors.

    Each step allocates a fresh receive tensor and a fresh sum (`a + b`), the chunks
    are cloned at the start and glued back with `torch.cat` at the end, and each rank
    finishes its send before it starts its receive (even ranks send first, odd ranks
    receive first, so the ring does not deadlock): half the links sit idle.
    Kept to measure what each fix is worth; use `ring_all_reduce`.
    """
    world_size, rank = dist.get_world_size(), dist.get_rank()
    if world_size == 1 or tensor.numel() == 0:
        return 0
    chunks = [piece.clone() for piece in torch.tensor_split(tensor.reshape(-1), world_size)]
    right, left = (rank + 1) % world_size, (rank - 1) % world_size

    def send_then_receive(outgoing: torch.Tensor, incoming: torch.Tensor) -> None:
        if rank % 2 == 0 and outgoing.numel():
            dist.send(outgoing, dst=right)
        if incoming.numel():
            dist.recv(incoming, src=left)
        if rank % 2 == 1 and outgoing.numel():
            dist.send(outgoing, dst=right)

    bytes_sent = 0
    for step in range(world_size - 1):
        send_index, receive_index = (rank - step) % world_size, (rank - step - 1) % world_size
        received = torch.empty_like(chunks[receive_index])
        send_then_receive(chunks[send_index], received)
        chunks[receive_index] = chunks[receive_index] + received
        bytes_sent += chunks[send_index].numel() * chunks[send_index].element_size()
    for step in range(world_size - 1):
        send_index, receive_index = (rank + 1 - step) % world_size, (rank - step) % world_size
        received = torch.empty_like(chunks[receive_index])
        send_then_receive(chunks[send_index], received)
        chunks[receive_index] = received
        bytes_sent += chunks[send_index].numel() * chunks[send_index].element_size()
    tensor.copy_(torch.cat(chunks).view_as(tensor))
    return bytes_sent
