"""Solution of exercise 03 · atomic_save (the task is in `../atomic_save.py`)."""

import os
from pathlib import Path

import torch


def save_atomic(state: dict, path: str | os.PathLike) -> None:
    """Save `state` to `path` so that `path` always holds a complete snapshot."""
    path = Path(path)
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "wb") as file:
        torch.save(state, file)
        file.flush()  # from Python's buffer to the operating system
        os.fsync(file.fileno())  # and from the operating system to the disk
    os.replace(temporary, path)  # readers see the old file or the new one, never half
