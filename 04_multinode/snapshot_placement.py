"""Lesson 04: which snapshot a multi-node job resumes from, and which ranks save it.

Imported by `multinode.py` (it launches nothing itself). On one machine (lesson 03)
global rank 0 saves and every rank loads the one file. On a cluster the snapshot
folder is either one filesystem that all nodes share (NFS, Lustre, ...) or a disk of
each node's own, and a script cannot reliably find out which (a test file written on
one node may show up late on another). So nothing here depends on knowing it:

- **Saving: local rank 0 of every node saves** (`multinode.py`). On folders of their
  own, every node keeps a copy, so the job can resume as long as any node keeps its
  disk. On a shared folder they all write the same file, with the same state (every
  replica holds the same weights); each writes a temporary file of its own and renames
  it over the snapshot (`common.snapshot.save_atomic`), so the file is always one
  writer's whole snapshot.
- **Resuming: every rank agrees on the newest snapshot** (`newest_snapshot`). Each rank
  reads the snapshot it sees, if any; one `all_gather` of everyone's position
  (`epochs_run`, -1 for none, and `steps_run`, for a snapshot of a stop in the middle
  of an epoch) tells every rank which rank holds the newest; that rank broadcasts its
  snapshot, and every rank loads the same state. A node that lost its disk, or kept an
  older copy, resumes from the newest like the others.

Why agree at all: ranks that loaded different snapshots train from different states.
DDP's constructor copies rank 0's weights to every rank; if rank 0's node has no
snapshot, every rank trains from fresh weights while the node that had one counts
from its later epoch, stops early, and saves a snapshot that claims, say, 8 epochs but
holds 2 epochs of training: silently corrupted. The other node then loses its partner
mid-epoch and fails (or, under other backends, waits for the timeout).

A file that one rank cannot read stops every rank, with one line that names that rank,
its node and the file: resuming without it could throw away the newest training.
"""

import os
from pathlib import Path
from typing import NamedTuple

import torch
import torch.distributed as dist

from common.distributed import log0
from common.snapshot import SnapshotError, load, prepare_folder

NO_SNAPSHOT = -1  # the epochs_run a rank reports when it sees no snapshot
UNREADABLE = -2  # ... and when it sees one that it cannot read


class Resume(NamedTuple):
    """The snapshot every rank resumes from, and where it came from."""

    state: dict
    rank: int  # the global rank that read it from its disk
    node: int  # that rank's node


def node_rank() -> int:
    """This process's node, as torchrun numbers them (GROUP_RANK; c10d sorts the
    agents by address, then process id)."""
    return int(os.environ.get("GROUP_RANK", 0))


def newest_snapshot(snapshot_path: Path, keys: tuple[str, ...], device) -> Resume | None:
    """The newest snapshot that any rank sees at `snapshot_path`, the same on every
    rank; None when no rank sees one. Every rank must call it (it makes collectives).

    Raises SnapshotError, on every rank and with the same one-line message, when some
    rank sees a snapshot file it cannot read."""
    state, problem = None, ""
    try:
        prepare_folder(snapshot_path)  # a path that cannot hold one: said now, not at a save
        if snapshot_path.exists():
            # On the CPU: the state may be sent to the other ranks, and a CUDA tensor
            # would arrive on the sender's GPU number. load_state_dict moves it later.
            state = load(snapshot_path, keys, map_location="cpu")
    except SnapshotError as error:
        problem = str(error)
    epochs_run = UNREADABLE if problem else NO_SNAPSHOT if state is None else state["epochs_run"]
    # Steps of the next epoch: a snapshot saved when the job was asked to stop.
    steps_run = 0 if state is None else state.get("steps_run", 0)

    # The one collective that decides: every rank's position, and its node for the log.
    mine = torch.tensor([epochs_run, steps_run, node_rank()], device=device)
    everyone = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    found = [((int(e), int(s)), int(node)) for e, s, node in everyone]  # by global rank

    # broadcast_object_list pickles the objects into a byte tensor on `device`: the CPU
    # under gloo; under nccl this rank's GPU, which must be the current device
    # (device_for() calls torch.cuda.set_device), else every rank would use GPU 0.
    unreadable = [rank for rank, ((epochs, _), _) in enumerate(found) if epochs == UNREADABLE]
    if unreadable:
        source = unreadable[0]  # its message goes to every rank: all stop alike
        message = [problem]
        dist.broadcast_object_list(message, src=source, device=device)
        raise SnapshotError(f"rank {source} on node {found[source][1]}: {message[0]}")

    newest = max(position for position, _ in found)  # (epochs, steps): the furthest
    source = next(rank for rank, (position, _) in enumerate(found) if position == newest)
    seen = ", ".join(
        f"rank {rank} (node {node}): {said(position)}"
        for rank, (position, node) in enumerate(found)
    )
    if newest[0] == NO_SNAPSHOT:
        log0(f"snapshots seen: {seen}; every rank starts from scratch")
        return None
    log0(f"snapshots seen: {seen}; every rank resumes from rank {source}'s")
    # Every rank receives it, also those whose own copy is as new: a tie between two
    # different files could otherwise split the ranks. (Cheap at this size; for a large
    # model one would send it only to the ranks that lack it.)
    sent = [state if dist.get_rank() == source else None]
    dist.broadcast_object_list(sent, src=source, device=device)
    return Resume(sent[0], source, found[source][1])


def said(position: tuple[int, int]) -> str:
    epochs, steps = position
    if epochs == NO_SNAPSHOT:
        return "none"
    return f"{epochs} epochs" + (f" and {steps} steps" if steps else "")
