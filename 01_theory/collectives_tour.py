"""Lesson 01: a tour of the collectives and point-to-point messages, each shown as
every rank's tensors before and after the call.

Each rank starts from tensors that say where they come from (rank r holds r+1 and
10(r+1)), runs one operation, and rank 0 prints a table: rank, before, after. Each
result is checked against what the operation promises; a wrong one stops the script
with a non-zero exit.

Launch it (from any folder, with the path to this file):

    torchrun --standalone --nproc_per_node=3 collectives_tour.py
    torchrun --standalone --nproc_per_node=4 collectives_tour.py --only all_reduce reduce_scatter

Collectives are called by *every* rank of the group; point-to-point messages
(send/recv, isend/irecv) only by the two ranks they connect. The `_single` stops are
the one-tensor forms (one flat tensor instead of a list; FSDP2 gathers parameters and
reduce-scatters gradients so). `all_gather_into_tensor` and `reduce_scatter_tensor`,
their older names, are deprecated aliases in PyTorch 2.14; the tour calls the names
this PyTorch has.
"""

import sys

import torch
import torch.distributed as dist

from common.cli import LessonArgumentParser
from common.distributed import device_for, end_process, log0, torchrun_env

LAUNCH = "torchrun --standalone --nproc_per_node=3 collectives_tour.py"
SUM = dist.ReduceOp.SUM
ALL_GATHER_ONE = next(
    n for n in ("all_gather_single", "all_gather_into_tensor") if hasattr(dist, n)
)
REDUCE_SCATTER_ONE = next(
    n for n in ("reduce_scatter_single", "reduce_scatter_tensor") if hasattr(dist, n)
)


def mine(rank: int, device) -> torch.Tensor:
    """Rank r's tensor: [r+1, 10(r+1)], so every result shows whose values it holds."""
    return torch.tensor([rank + 1, 10 * (rank + 1)], device=device)


def text(value) -> str:
    if isinstance(value, list | tuple):
        return "[" + ", ".join(text(v) for v in value) + "]"
    if isinstance(value, torch.Tensor):
        return str(value.tolist())
    return str(value)


# Each tour stop: (what it does, the function each rank runs, the expected result).
# The function returns (before, after) for this rank; `expect(rank, world_size)`
# returns what `after` must be, or None where the call leaves nothing defined.


def broadcast(rank, world_size, device):
    t = mine(rank, device)
    before = t.clone()
    dist.broadcast(t, src=0)
    return before, t


def reduce(rank, world_size, device):
    t = mine(rank, device)
    before = t.clone()
    dist.reduce(t, dst=0, op=SUM)
    return before, t


def all_reduce(rank, world_size, device):
    t = mine(rank, device)
    before = t.clone()
    dist.all_reduce(t, op=SUM)
    return before, t


def all_gather(rank, world_size, device):
    t = mine(rank, device)
    out = [torch.zeros_like(t) for _ in range(world_size)]
    dist.all_gather(out, t)
    return t, out


def all_gather_single(rank, world_size, device):
    t = mine(rank, device)
    out = torch.zeros(2 * world_size, dtype=t.dtype, device=device)
    getattr(dist, ALL_GATHER_ONE)(out, t)
    return t, out


def gather(rank, world_size, device):
    t = mine(rank, device)
    out = [torch.zeros_like(t) for _ in range(world_size)] if rank == 0 else None
    dist.gather(t, gather_list=out, dst=0)
    return t, out if rank == 0 else "-"


def scatter(rank, world_size, device):
    pieces = [torch.tensor([100 + j], device=device) for j in range(world_size)]
    out = torch.zeros(1, dtype=torch.int64, device=device)
    dist.scatter(out, scatter_list=pieces if rank == 0 else None, src=0)
    return pieces if rank == 0 else "-", out


def reduce_scatter(rank, world_size, device):
    # Rank r contributes piece j = [(r+1) * 10^j]; rank j receives the sum of pieces j.
    pieces = [torch.tensor([(rank + 1) * 10**j], device=device) for j in range(world_size)]
    out = torch.zeros(1, dtype=torch.int64, device=device)
    dist.reduce_scatter(out, pieces, op=SUM)
    return pieces, out


def reduce_scatter_single(rank, world_size, device):
    # reduce_scatter's pieces, as one tensor: element j is rank r's piece j.
    pieces = torch.tensor([(rank + 1) * 10**j for j in range(world_size)], device=device)
    out = torch.zeros(1, dtype=torch.int64, device=device)
    getattr(dist, REDUCE_SCATTER_ONE)(out, pieces, op=SUM)
    return pieces, out


def all_to_all(rank, world_size, device):
    # Piece j of rank r is [10r + j]; it travels to rank j.
    pieces = [torch.tensor([10 * rank + j], device=device) for j in range(world_size)]
    out = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(world_size)]
    dist.all_to_all(out, pieces)
    return pieces, out


def all_to_all_single(rank, world_size, device):
    # all_to_all's pieces, as one tensor split in equal parts: part j goes to rank j.
    pieces = torch.tensor([10 * rank + j for j in range(world_size)], device=device)
    out = torch.zeros_like(pieces)
    dist.all_to_all_single(out, pieces)
    return pieces, out


def barrier(rank, world_size, device):
    # Nothing moves: every rank waits here until all have arrived.
    dist.barrier()
    return "-", "-"


def send_recv(rank, world_size, device):
    t = mine(rank, device)
    before = t.clone()
    if rank == 0:
        dist.send(t, dst=1)  # t can be reused once it returns (on nccl: once it is queued)
    elif rank == 1:
        dist.recv(t, src=0)  # blocks until the message from rank 0 arrives
    return before, t


def isend_irecv(rank, world_size, device):
    # Every rank passes its tensor to the right at the same time: the ring's step. One
    # batch: nccl promises that sends and receives progress together only when grouped;
    # ungrouped, each rank's irecv could hold up its isend, and every rank would wait for
    # its left neighbour, which waits for its own, round the ring.
    t = mine(rank, device)
    incoming = torch.zeros_like(t)
    requests = dist.batch_isend_irecv(
        [
            dist.P2POp(dist.irecv, incoming, (rank - 1) % world_size),
            dist.P2POp(dist.isend, t, (rank + 1) % world_size),
        ]
    )
    for request in requests:
        request.wait()  # t may be reused only once its send is complete
    return t, incoming


def col_sum(world_size):
    return [sum(r + 1 for r in range(world_size)), sum(10 * (r + 1) for r in range(world_size))]


TOUR = {
    "broadcast": (
        "broadcast(t, src=0): rank 0's tensor is copied to every rank",
        broadcast,
        lambda r, n: [1, 10],
    ),
    "reduce": (
        "reduce(t, dst=0, op=SUM): the sum lands on rank 0 only (other ranks' t is scratch)",
        reduce,
        lambda r, n: col_sum(n) if r == 0 else None,
    ),
    "all_reduce": (
        "all_reduce(t, op=SUM): every rank ends with the sum (what DDP does to gradients)",
        all_reduce,
        lambda r, n: col_sum(n),
    ),
    "all_gather": (
        "all_gather(out_list, t): every rank ends with every rank's tensor",
        all_gather,
        lambda r, n: [[j + 1, 10 * (j + 1)] for j in range(n)],
    ),
    ALL_GATHER_ONE: (
        f"{ALL_GATHER_ONE}(out, t): all_gather into one flat tensor",
        all_gather_single,
        lambda r, n: [v for j in range(n) for v in (j + 1, 10 * (j + 1))],
    ),
    "gather": (
        "gather(t, gather_list, dst=0): rank 0 collects every rank's tensor",
        gather,
        lambda r, n: [[j + 1, 10 * (j + 1)] for j in range(n)] if r == 0 else "-",
    ),
    "scatter": (
        "scatter(out, scatter_list, src=0): rank 0 hands piece j to rank j",
        scatter,
        lambda r, n: [100 + r],
    ),
    "reduce_scatter": (
        "reduce_scatter(out, pieces, op=SUM): rank j gets the sum of everyone's piece j",
        reduce_scatter,
        lambda r, n: [sum((k + 1) * 10**r for k in range(n))],
    ),
    REDUCE_SCATTER_ONE: (
        f"{REDUCE_SCATTER_ONE}(out, t, op=SUM): reduce_scatter, the pieces in one tensor",
        reduce_scatter_single,
        lambda r, n: [sum((k + 1) * 10**r for k in range(n))],
    ),
    "all_to_all": (
        "all_to_all(out_list, pieces): piece j of every rank goes to rank j",
        all_to_all,
        lambda r, n: [[10 * k + r] for k in range(n)],
    ),
    "all_to_all_single": (
        "all_to_all_single(out, t): all_to_all, one tensor in equal parts",
        all_to_all_single,
        lambda r, n: [10 * k + r for k in range(n)],
    ),
    "barrier": ("barrier(): no data; no rank leaves until every rank has arrived", barrier, None),
    "send_recv": (
        "send(t, dst=1) on rank 0, recv(t, src=0) on rank 1: blocking, two ranks only",
        send_recv,
        lambda r, n: [1, 10] if r in (0, 1) else [r + 1, 10 * (r + 1)],
    ),
    "isend_irecv": (
        "isend to the right, irecv from the left, one batch, then wait(): all ranks at once",
        isend_irecv,
        lambda r, n: [(r - 1) % n + 1, 10 * ((r - 1) % n + 1)],
    ),
}


def as_plain(value):
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, list):
        return [as_plain(v) for v in value]
    return value


def main():
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument("--only", nargs="+", choices=list(TOUR), help="run only these stops")
    args = parser.parse_args()
    local_rank, global_rank, world_size = torchrun_env(launch_hint=LAUNCH)
    if world_size < 2:
        sys.exit(f"the tour needs at least 2 processes, not {world_size}; launch it as: {LAUNCH}")

    device = device_for(local_rank)
    dist.init_process_group(
        backend=dist.get_default_backend_for_device(device),
        device_id=device if device.type == "cuda" else None,  # nccl: this GPU, connect now
    )
    log0(f"collectives tour on {world_size} ranks, backend {dist.get_backend()}")
    failures = []
    for name in args.only or list(TOUR):
        description, operation, expect = TOUR[name]
        try:
            before, after = operation(global_rank, world_size, device)
        except (RuntimeError, NotImplementedError) as error:
            # Older torch versions' gloo lack some collectives (reduce_scatter before 2.6).
            reason = str(error).strip().splitlines()[0][:120]
            log0(f"== {name}: not supported by {dist.get_backend()} here ({reason})")
            continue
        rows = [None] * world_size
        dist.all_gather_object(rows, (as_plain(before), as_plain(after)))
        if global_rank != 0:
            continue
        log0(f"== {name}: {description}")
        width = max(len("before"), *(len(text(row[0])) for row in rows)) + 2
        log0(f"   rank  {'before':<{width}}after")
        for rank, (row_before, row_after) in enumerate(rows):
            log0(f"   {rank:>4}  {text(row_before):<{width}}{text(row_after)}")
            wanted = expect(rank, world_size) if expect else None
            if wanted is not None and row_after != wanted:
                failures.append(f"{name} on rank {rank}: got {row_after}, expected {wanted}")
    if failures:
        log0("WRONG: " + "; ".join(failures))
        sys.exit(1)
    log0(f"every result is what the operation promises ({world_size} ranks)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    end_process()  # not Python's teardown: see common.distributed.end_process
