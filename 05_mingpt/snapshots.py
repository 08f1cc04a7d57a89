"""Lesson 05: which snapshot a run resumes from, and what a resume must refuse.

Used by `trainer.py` (see main.py's docstring for the commands that launch the lesson).

- At start-up every rank reads the snapshot it sees, and all agree on the newest that
  any of them sees, which that rank sends to the others: lesson 04's rule
  (snapshot_placement.py). On one machine every rank reads the same file; on nodes
  whose folders are not shared, a node that sees no snapshot resumes from the one that
  rank 0 wrote on its own node, instead of training from scratch beside it.
- A snapshot trained with other settings, on another text or in another precision is
  refused in one line: resumed, it would not crash but silently train another run.
"""

import json
from pathlib import Path

import torch
import torch.distributed as dist

from common.distributed import log0
from common.snapshot import SnapshotError, load, prepare_folder

SNAPSHOT_KEYS = ("model", "optimizer", "scaler", "step", "epochs_run", "rng", "chars",
                 "settings", "seconds")  # fmt: skip


def newest_snapshot(path: Path, device: torch.device) -> dict | None:
    """The newest snapshot that any rank sees at `path`, the same on every rank; None
    when no rank sees one. A collective: every rank calls it. A file that a rank cannot
    read stops every rank (SnapshotError): resuming without it could lose training."""
    state, problem = None, None
    try:
        prepare_folder(path)  # a path that cannot hold one: said now, not at the first save
        if path.exists():  # on the CPU: it may be sent to other ranks
            state = load(path, SNAPSHOT_KEYS, map_location="cpu")
    except SnapshotError as error:
        problem = str(error)
    reports = [None] * dist.get_world_size()
    dist.all_gather_object(reports, (state["step"] if state else -1, problem))
    problems = {rank: problem for rank, (_, problem) in enumerate(reports) if problem}
    if problems:
        rank, problem = next(iter(problems.items()))
        alike = len(problems) == len(reports) and len(set(problems.values())) == 1
        raise SnapshotError(problem if alike else f"rank {rank}: {problem}")
    steps = [step for step, _ in reports]
    source = steps.index(max(steps))
    seen = ", ".join(f"rank {r}: {f'step {s}' if s >= 0 else 'none'}" for r, s in enumerate(steps))
    if steps[source] < 0:
        return None
    log0(f"snapshots seen: {seen}; every rank resumes from rank {source}'s")
    sent = [state]
    dist.broadcast_object_list(sent, src=source, device=device)
    return sent[0]


def check_snapshot(state: dict, chars: str, settings: dict, path: Path) -> None:
    """SnapshotError, in one line, if `state` was trained on another text or with other
    settings than `settings`."""
    if state["chars"] != chars:
        raise SnapshotError(
            f"snapshot {path} was trained on another text (its characters differ); delete "
            "it to start from scratch, or train on its text"
        )
    saved = state["settings"]
    changes = [f"{k}={saved.get(k)!r} -> {v!r}" for k, v in settings.items() if saved.get(k) != v]
    if changes:
        listed = ", ".join(changes[:3]) + (f" and {len(changes) - 3} more" if changes[3:] else "")
        raise SnapshotError(
            f"snapshot {path} was trained with other settings ({listed}); resume with its "
            "settings, or delete it to start from scratch"
        )


def keep_metrics_up_to(path: Path, step: int | None) -> None:
    """Drop the metrics rows written after the snapshot at `step`: the resumed run
    writes them again, and a plot would show those steps twice. `None`, a fresh run:
    drop them all (an old run's rows would mix with the new one's)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if step is None or not path.exists():
        path.write_text("")
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            if json.loads(line)["step"] <= step:
                kept.append(line + "\n")
        except (ValueError, KeyError, TypeError):
            pass  # a line cut short by a crash, or not ours
    path.write_text("".join(kept))
