"""Lesson 05: the snapshot files a run keeps: the latest, the newest few, and the best.

Used by `trainer.py` (see main.py's docstring for the commands that launch the lesson).

- `snapshot.pt` (trainer.snapshot_path) is always the latest: the one a resume reads.
  Each save writes a new file beside it and renames it over the old one
  (`common.snapshot.save_atomic`), so a crash mid-save leaves the previous snapshot.
- With `trainer.keep_snapshots=K`, the newest K saves are also kept as
  `snapshot.step0000120.pt`: a run that went wrong (a loss spike, a bad data shard)
  can be resumed from before it. They are hard links to the latest file (no second
  write of the same bytes), or copies where the filesystem has no links.
- `snapshot.best.pt` is the state at the lowest validation loss so far: the model a
  run that trained on past its best would hand over.

Only global rank 0 writes (the others call too, and return): the folder must be one
every rank reads when a run resumes on several machines (lesson 04 keeps a copy per
node instead).
"""

import os
import shutil
from pathlib import Path

from common.distributed import log
from common.snapshot import save_atomic


class SnapshotFiles:
    def __init__(self, latest: str | os.PathLike, keep: int, rank: int):
        self.latest, self.keep, self.rank = Path(latest), keep, rank
        self.best = self._beside(".best")

    def _beside(self, tag: str) -> Path:
        return self.latest.with_name(f"{self.latest.stem}{tag}{self.latest.suffix}")

    def tagged(self, step: int) -> Path:
        return self._beside(f".step{step:07d}")

    def kept(self) -> list[Path]:
        """The step-tagged snapshots on disk, oldest first."""
        pattern = f"{self.latest.stem}.step*{self.latest.suffix}"
        return sorted(self.latest.parent.glob(pattern))

    def save(self, state: dict, step: int) -> None:
        """Write `state` as the latest snapshot; keep it tagged with its step if asked."""
        if self.rank != 0:
            return
        save_atomic(state, self.latest)
        log(f"step {step}: snapshot saved to {self.latest}")
        if not self.keep:
            return
        _link_or_copy(self.latest, self.tagged(step))
        for old in self.kept()[: -self.keep]:
            old.unlink()

    def save_best(self, state: dict, step: int, val_loss: float) -> None:
        if self.rank != 0:
            return
        save_atomic(state, self.best)
        log(f"step {step}: validation loss {val_loss:.4f}, the lowest yet: saved to {self.best}")


def _link_or_copy(source: Path, target: Path) -> None:
    """`target` holds `source`'s bytes, atomically: a link (or copy) under a temporary
    name, renamed."""
    temporary = target.with_name(f".{target.name}.{os.getpid()}.link.tmp")
    temporary.unlink(missing_ok=True)
    try:
        os.link(source, temporary)
    except OSError:  # a filesystem without hard links
        shutil.copyfile(source, temporary)
    os.replace(temporary, target)
