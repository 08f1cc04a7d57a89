"""Training snapshots that survive a crash: written atomically, loaded safely.

Introduced in 03_fault_tolerance; used by 03_fault_tolerance, 04_multinode and
05_mingpt. What goes *into* a snapshot (model, optimizer, epochs run, RNG state) is
each lesson's business and stays in its script; this module only makes sure that

- a snapshot on disk is always a whole one: the new one is written to a temporary
  file of the writer's own in the same folder, flushed to the disk, then renamed over
  the old one. The rename guards against a killed process (the previous snapshot stays
  until the new one is whole; the official series writes in place and can leave half a
  file), the fsyncs against a machine crash (the bytes, then the new name, are on
  disk). Rename is atomic on POSIX local filesystems and on NFS-style shares (NFS,
  Lustre), but not on object-store mounts (s3fs, gcsfuse), where it is a copy and a
  delete;
- several writers of one path (lesson 04: one per node, on a folder the nodes share)
  never mix their bytes: each writes its own temporary file (named with its pid and a
  random part), so the snapshot is always one writer's whole file;
- a file that is not a snapshot (empty, truncated, something else) gets one clear
  line naming the file and what to do, not a pickle traceback;
- loading runs no code from the file (`weights_only=True`).
"""

import os
import secrets
from pathlib import Path

import torch


class SnapshotError(Exception):
    """The file at the snapshot path cannot be used to resume. The message is one line
    that names the file and says what to do."""


def temporary_files(path: str | os.PathLike) -> list[Path]:
    """The temporary files of writes to `path` not finished yet: a writer's own while it
    writes, or one left by a writer killed mid-write. Never read; safe to delete once
    no writer runs."""
    path = Path(path)
    return sorted(path.parent.glob(f".{path.name}.*.tmp"))


def prepare_folder(path: str | os.PathLike) -> None:
    """Make the folder that will hold the snapshot at `path`, at start-up, or raise
    SnapshotError in one line: a path that cannot hold a snapshot (under a file, in a
    folder this process cannot write) is then refused before any training, not found out
    by a traceback at the first save."""
    path = Path(path)
    advice = "point the script at a snapshot path in a folder you can write"
    folder = path.parent
    nearest = next(place for place in (folder, *folder.parents) if place.exists())
    if not nearest.is_dir():
        raise SnapshotError(f"cannot keep snapshots at {path}: {nearest} is a file; {advice}")
    if path.is_dir():
        raise SnapshotError(f"cannot keep snapshots at {path}: it is a folder; {advice}")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise SnapshotError(
            f"cannot keep snapshots at {path}: {error.strerror}; {advice}"
        ) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise SnapshotError(f"cannot keep snapshots at {path}: {folder} is not writable; {advice}")


def save_atomic(state: dict, path: str | os.PathLike) -> None:
    """Write `state` to `path` so that `path` always holds a complete snapshot, even
    with several processes writing it at once."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # In the same folder, so the rename stays on one filesystem; a name no other writer
    # uses (pid, and a random part for writers on other nodes with the same pid).
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    file = open(temporary, "xb")  # "x": fail rather than share a file with another writer
    try:
        with file:
            torch.save(state, file)
            file.flush()
            os.fsync(file.fileno())  # the bytes are on disk before the name points at them
        os.replace(temporary, path)  # atomic: readers see the old file or the new one
    except BaseException:  # a failed save (or Ctrl-C) leaves no temporary file behind
        temporary.unlink(missing_ok=True)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)  # and the rename itself survives a power cut
    finally:
        os.close(folder)


def load(path: str | os.PathLike, required_keys: tuple[str, ...], map_location=None) -> dict:
    """Load the snapshot at `path`, checking that it holds `required_keys`.

    `map_location` puts the tensors on this process's device, not on the device of
    the process that saved them. Raises SnapshotError with a one-line message when the
    file is empty, unreadable, or not a snapshot of this kind.
    """
    path = Path(path)
    advice = f"delete {path} to start from scratch, or point the script at another snapshot path"
    if path.stat().st_size == 0:
        raise SnapshotError(f"snapshot {path} is empty; {advice}")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:  # truncated zip, a pickle of other things, not a file of ours
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise SnapshotError(f"snapshot {path} cannot be read ({reason[:120]}); {advice}") from None
    missing = [key for key in required_keys if not isinstance(state, dict) or key not in state]
    if missing:
        raise SnapshotError(
            f"{path} is not a snapshot of this script (it has no {', '.join(missing)}); {advice}"
        )
    return state
