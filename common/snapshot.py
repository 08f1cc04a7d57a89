"""Training snapshots that survive a crash: written atomically, loaded safely.

Introduced in 03_fault_tolerance; used by 03_fault_tolerance, 04_multinode and
05_mingpt. What goes *into* a snapshot (model, optimizer, epochs run, RNG state) is
each lesson's business and stays in its script; this module only makes sure that

- a snapshot on disk is always a whole one: the new one is written to a temporary
  file in the same folder, flushed to the disk, then renamed over the old one. A
  rename within a folder is atomic, so a process killed mid-write leaves the previous
  snapshot in place (the official series writes in place and can leave half a file);
- a file that is not a snapshot (empty, truncated, something else) gets one clear
  line naming the file and what to do, not a pickle traceback;
- loading runs no code from the file (`weights_only=True`).
"""

import os
from pathlib import Path

import torch


class SnapshotError(Exception):
    """The file at the snapshot path cannot be used to resume. The message is one line
    that names the file and says what to do."""


def temporary_path(path: Path) -> Path:
    """Where a snapshot is written before it replaces `path`."""
    return path.with_name(path.name + ".tmp")


def save_atomic(state: dict, path: str | os.PathLike) -> None:
    """Write `state` to `path` so that `path` always holds a complete snapshot."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = temporary_path(path)
    with open(temporary, "wb") as file:
        torch.save(state, file)
        file.flush()
        os.fsync(file.fileno())  # the bytes are on disk before the name points at them
    os.replace(temporary, path)  # atomic: readers see the old file or the new one
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
