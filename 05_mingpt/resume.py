"""Lesson 05: the checks that keep a resume from going silently wrong.

Used by `trainer.py` (see main.py's docstring for the commands that launch the lesson).

A snapshot resumed with other settings, of another text or model, by ranks that read
different snapshots, or with another schedule, does not crash: it trains on, wrongly.
Each case here stops or warns in one line instead (the precision's: precision.py).
"""

import json
from pathlib import Path

import torch
import torch.distributed as dist

from common.snapshot import SnapshotError, load, prepare_folder

SNAPSHOT_KEYS = (
    "model", "optimizer", "scaler", "precision", "step", "decay_steps", "best_val_loss",
    "rng", "chars", "settings", "seconds",
)  # fmt: skip


def read_snapshot(path: Path, device: torch.device, model, optimizer, chars: str,
                  settings: dict, accept_changes: bool) -> tuple[dict | None, list]:  # fmt: skip
    """Load the snapshot at `path`, if there is one, into `model` and `optimizer`: (its
    state, notices to print), (None, []) when there is none, or SnapshotError in one line
    when it cannot be resumed here or `path` cannot hold a snapshot at all."""
    prepare_folder(path)  # a path that cannot hold one: said now, not at the first save
    if not path.exists():
        return None, []
    state = load(path, SNAPSHOT_KEYS, map_location=device)  # tensors onto this device
    if state["chars"] != chars:
        raise SnapshotError(
            f"snapshot {path} was trained on another text (its characters differ); delete "
            "it to start from scratch, or train on its text"
        )
    notices = [check_settings(state["settings"], settings, path, accept_changes)]
    try:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError) as error:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        reason = lines[min(1, len(lines) - 1)][:150]  # line 0 only says "Error(s) in..."
        raise SnapshotError(
            f"snapshot {path} does not fit this model ({reason}); delete it to start from "
            "scratch, or use the config it was trained with"
        ) from None
    return state, notices


def resumed_schedule(state: dict, decay_steps: int, config) -> tuple[int, str | None]:
    """The schedule's length for a resume. A run trained on with more epochs
    (--resume_with_new_config) keeps the snapshot's: its learning rate has decayed to
    min_lr and stays there, instead of jumping back up a new, longer cosine."""
    saved = state["decay_steps"]
    if saved == decay_steps or config.optimizer.decay_steps:  # the same, or set anew
        return decay_steps, None
    return saved, (
        f"the learning rate keeps the snapshot's schedule (cosine decay to min_lr at step "
        f"{saved}, then min_lr); set optimizer.decay_steps to decay over another length"
    )


class ResumeMismatch(SnapshotError):
    """The ranks disagree about the snapshot: every rank prints its own line."""


def changed_settings(saved: dict, current: dict) -> list[str]:
    """`key=old -> new` for every setting that differs, in the current order."""
    return [
        f"{key}={saved.get(key)!r} -> {value!r}"
        for key, value in current.items()
        if saved.get(key) != value
    ]


def check_settings(saved: dict, current: dict, path: Path, accept_changes: bool) -> str | None:
    """Raise SnapshotError if the snapshot was trained with other settings than this
    run's; with `accept_changes`, return a notice naming them instead."""
    changes = changed_settings(saved, current)
    if not changes:
        return None
    listed = ", ".join(changes[:3]) + (f" and {len(changes) - 3} more" if len(changes) > 3 else "")
    if accept_changes:
        return f"resuming {path} with changed settings: {listed}"
    raise SnapshotError(
        f"snapshot {path} was trained with other settings ({listed}); resume with its "
        "settings, delete it to start from scratch, or pass --resume_with_new_config"
    )


def check_ranks_agree(step: int | None, error: str | None, rank: int, path: Path) -> None:
    """Every rank must resume from the same step (a collective: every rank calls it,
    with the step it would resume from, or the error that stops it). On one machine
    every rank reads the same file; on several, a snapshot path that is not shared
    gives some nodes an old snapshot or none."""
    reports: list = [None] * dist.get_world_size()
    dist.all_gather_object(reports, (step, error))
    errors = {r: e for r, (_, e) in enumerate(reports) if e is not None}
    if errors and len(errors) == len(reports) and len(set(errors.values())) == 1:
        raise SnapshotError(error)  # the same on every rank: rank 0 says it for all
    if errors:
        if error is not None:
            raise ResumeMismatch(f"rank {rank}: {error}")
        failed = ", ".join(str(r) for r in errors)
        raise ResumeMismatch(
            f"rank {rank}: rank(s) {failed} cannot resume from {path} (their line says "
            "why), so no rank trains"
        )
    steps = [s for s, _ in reports]
    if len(set(steps)) > 1:
        where = ", ".join(
            f"rank {r} at step {s}" if s else f"rank {r} from scratch" for r, s in enumerate(steps)
        )
        raise ResumeMismatch(
            f"rank {rank}: the ranks would resume from different points ({where}): "
            f"{path} must be the same file for every rank (a folder every node sees)"
        )


def keep_metrics_up_to(path: Path, step: int | None) -> None:
    """Drop the metrics rows written after the snapshot at `step`: the resumed run
    writes them again, and a plot would show those steps twice. `None`, a fresh run:
    drop them all (an old run's rows would mix with the new one's)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        return
    if step is None:
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
