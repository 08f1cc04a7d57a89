"""Exercise 03 · atomic_save: a snapshot that a crash cannot half-write.

`torch.save(state, path)` opens `path`, empties it, and writes the new snapshot into
it. A process killed in between (a crash, a preemption, a full disk) leaves half a
file: the old snapshot is gone and the new one cannot be read, so the job cannot
resume. The official series saves this way.

Task: write `save_atomic` so that `path` always holds a whole snapshot, the old one or
the new one:
1. write the state into a temporary file *in the same folder* (a rename is atomic only
   within one filesystem), e.g. `snapshot.pt.tmp`;
2. flush it and `os.fsync` it, so that its bytes are on the disk before its name is;
3. `os.replace(temporary, path)`: one atomic step, after which `path` names the new file.

The check saves twice and loads each snapshot back, asserts that nothing else is left
in the folder (nor in the system temp folder) and that the second save made a new file
rather than rewriting the old one. Then it interrupts a third save half-way and asserts
that the save raised (the interruption, or an error of yours raised from it) and that
the second snapshot is still there, whole. It also watches `os.fsync`: each snapshot
must have been fsynced whole, in the snapshot's folder, before the rename gave it its
name. (`common.snapshot.save_atomic` is the course's own version: try without reading
it first.)
"""

import os
from pathlib import Path

import torch  # noqa: F401 (you will need it: torch.save)


def save_atomic(state: dict, path: str | os.PathLike) -> None:
    """Save `state` to `path` so that `path` always holds a complete snapshot."""
    path = Path(path)
    temporary = path.with_name(path.name + ".tmp")
    # TODO: torch.save into `temporary` (an open file: flush and fsync it), then
    # os.replace it over `path`.
    raise NotImplementedError(f"save_atomic: write {temporary}, then rename it to {path}")
