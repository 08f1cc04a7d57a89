"""Lesson 05: the checks that keep a resume from going silently wrong.

Used by `trainer.py` (see main.py's docstring for the commands that launch the lesson).

A snapshot resumed with other settings, by ranks that read different snapshots, or
into another precision, does not crash: it trains on, wrongly. Each case here stops
or warns in one line instead.
"""

import json
from pathlib import Path

import torch.distributed as dist

from common.snapshot import SnapshotError


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


def scaler_notice(saved_state: dict, scaler_enabled: bool, precision: str) -> str | None:
    """A notice when the snapshot's GradScaler state does not fit this run's precision
    (an empty state comes from a disabled scaler: bf16 or float32)."""
    if saved_state and not scaler_enabled:
        return (
            f"the snapshot trained in fp16 with loss scaling (scale {saved_state['scale']:g}); "
            f"{precision} needs none: its scaler state is dropped"
        )
    if not saved_state and scaler_enabled:
        return "the snapshot trained without loss scaling: fp16 starts a new GradScaler"
    return None


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


def keep_metrics_up_to(path: Path, step: int) -> None:
    """Drop the metrics rows written after the snapshot at `step`: the resumed run
    writes them again, and a plot would show those steps twice."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            if json.loads(line)["step"] <= step:
                kept.append(line + "\n")
        except (ValueError, KeyError, TypeError):
            pass  # a line cut short by a crash, or not ours
    path.write_text("".join(kept))
