"""Lesson 01's hand-written ring all-reduce (`common/ring.py`) in real gloo worlds of 4, 3
and 2 CPU processes, against `dist.all_reduce` and the bytes it should send."""

import torch
import torch.distributed as dist
from conftest import spawn

from common.ports import free_port
from common.ring import chunk_bounds, ring_all_reduce, ring_all_reduce_straightforward

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64]


def chunk_sizes(numel, world_size):
    bounds = chunk_bounds(numel, world_size)
    return [bounds[c + 1] - bounds[c] for c in range(world_size)]


def data(rank, numel, dtype, seed):
    generator = torch.Generator().manual_seed(seed * 1000 + rank)
    if dtype in (torch.float32, torch.float64):
        return torch.randn(numel, generator=generator, dtype=torch.float64).to(dtype)
    return torch.randint(-8, 9, (numel,), generator=generator).to(dtype)  # exact sums


def check_world(rank, world_size, port):
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size
    )
    sent_bytes, real_batch = [], dist.batch_isend_irecv

    def counting_batch(operations):  # what really goes out, not what the ring reports
        sent = [op.tensor for op in operations if op.op is dist.isend]
        sent_bytes.extend(tensor.numel() * tensor.element_size() for tensor in sent)
        return real_batch(operations)

    dist.batch_isend_irecv = counting_batch
    try:
        seed = everyone_sent = everyone_should = 0
        # Every dtype's sums at 2 and 4 ranks against dist.all_reduce, exact where the sums
        # are: 01_theory's check cell. Here: the bytes sent for each, and 3 ranks too.
        for dtype in DTYPES:
            sizes = sorted(
                {1, world_size - 1, world_size, world_size + 1, 2 * world_size + 1, 1000, 4099}
            )
            if dtype not in (torch.float32, torch.int64):  # fewer sizes: keep the test quick
                sizes = [1, world_size + 1, 1000]
            for numel in sizes:
                seed += 1
                mine = data(rank, numel, dtype, seed)
                sent_bytes.clear()
                ours = mine.clone()
                reported = ring_all_reduce(ours)

                # Traffic: each rank sends every chunk but (r+1), then every chunk but (r+2).
                chunks = chunk_sizes(numel, world_size)
                element = mine.element_size()
                skipped = chunks[(rank + 1) % world_size] + chunks[(rank + 2) % world_size]
                assert sum(sent_bytes) == reported == (2 * numel - skipped) * element
                everyone_sent += sum(sent_bytes)
                everyone_should += 2 * (world_size - 1) * numel * element  # all ranks together
                if numel % world_size == 0:
                    assert sum(sent_bytes) * world_size == 2 * (world_size - 1) * numel * element

                if not dtype.is_floating_point:  # integer sums are exact: equal
                    library = mine.clone()
                    dist.all_reduce(library)
                    assert torch.equal(ours, library), (numel, dtype)
                    if dtype == torch.int64:  # the slow version, once per size
                        slow = mine.clone()
                        ring_all_reduce_straightforward(slow)
                        assert torch.equal(slow, library), numel
        total = torch.tensor([everyone_sent])
        dist.all_reduce(total)
        assert total.item() == everyone_should

        # Chunks in pieces (1 MB by default, too big above): every piece within the limit
        # (100 bytes: 12 int64), a chunk in as many as it fills (empty ones not sent).
        for numel, piece_bytes in ((99, 64), (99, 100), (41, 8), (2 * world_size + 1, 8)):
            seed += 1
            mine = data(rank, numel, torch.int64, seed)
            library = mine.clone()
            dist.all_reduce(library)
            ours = mine.clone()
            sent_bytes.clear()
            reported = ring_all_reduce(ours, piece_bytes=piece_bytes)
            torch.testing.assert_close(ours, library, rtol=0, atol=0)
            assert max(sent_bytes) <= piece_bytes
            chunks = chunk_sizes(numel, world_size)
            pieces = -(-chunks[0] // (piece_bytes // 8))  # the largest chunk's, on every rank
            sent_chunks = [c for c in range(world_size) if c != (rank + 1) % world_size]
            sent_chunks += [c for c in range(world_size) if c != (rank + 2) % world_size]
            assert len(sent_bytes) == sum(min(pieces, chunks[c]) for c in sent_chunks)
            assert sum(sent_bytes) == reported == sum(chunks[c] for c in sent_chunks) * 8

        # Shapes and layouts other than a flat contiguous tensor.
        matrix = data(rank, 35, torch.float64, 999).reshape(5, 7)
        library = matrix.t().contiguous()
        ours = matrix.clone().t()
        assert not ours.is_contiguous()
        ring_all_reduce(ours)
        dist.all_reduce(library)
        torch.testing.assert_close(ours, library)
        assert ours.shape == (7, 5)
    finally:
        dist.batch_isend_irecv = real_batch
        dist.destroy_process_group()


def check_worlds(rank, ports):
    """The world of 4, then ranks 0-2 as a world of 3 (unequal chunks at the large sizes
    too), then 0-1 as a world of 2 (left == right): one start of 4 processes."""
    for world_size, port in zip((4, 3, 2), ports, strict=True):
        if rank < world_size:
            check_world(rank, world_size, port)


def test_ring_equals_all_reduce_and_sends_2_n_minus_1_over_n():
    spawn(check_worlds, 4, (free_port(), free_port(), free_port()))
