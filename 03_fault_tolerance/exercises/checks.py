"""Checks of lesson 03's coding exercises; `course.exercises.check` runs them."""

import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

from course.exercises import load, run_in_world


class _Interrupt:
    """Pickling this raises: a save of a state that holds one stops half-way, the way a
    crash would (after the file was opened and part of the state written)."""

    def __reduce__(self):
        raise RuntimeError("the save was interrupted here (a simulated crash)")


def _state(epochs_run: int) -> dict:
    return {"model": {"weight": torch.full((1000,), float(epochs_run))}, "epochs_run": epochs_run}


def _epochs_in(path: Path, when: str) -> int:
    try:
        state = torch.load(path, weights_only=True)
    except Exception as error:
        raise AssertionError(f"{when}, {path.name} cannot be loaded: {error}") from None
    return state["epochs_run"]


def atomic_save(path) -> str:
    exercise = load(path)
    with tempfile.TemporaryDirectory(prefix="atomic-save-") as folder:
        snapshot = Path(folder) / "snapshot.pt"
        inodes = []
        for epochs_run in (1, 2):
            exercise.save_atomic(_state(epochs_run), snapshot)
            got = _epochs_in(snapshot, f"after save number {epochs_run}")
            assert got == epochs_run, (
                f"after saving epochs_run={epochs_run}, the snapshot holds epochs_run={got}"
            )
            left = sorted(p.name for p in Path(folder).iterdir())
            assert left == ["snapshot.pt"], (
                f"after a save the folder should hold only snapshot.pt, it holds {left}"
            )
            inodes.append(snapshot.stat().st_ino)

        interrupted = {**_state(3), "crash": _Interrupt()}
        try:
            exercise.save_atomic(interrupted, snapshot)
        except Exception as error:
            if "simulated crash" not in str(error):
                raise
        got = _epochs_in(snapshot, "after a save interrupted half-way")
        assert got == 2, (
            f"after a save interrupted half-way, the snapshot should still be the last "
            f"whole one (epochs_run=2), it holds epochs_run={got}"
        )
        # A file written in place keeps its inode: the window in which a crash leaves
        # half a snapshot is still there, even if this interruption missed it.
        assert inodes[0] != inodes[1], (
            "the second snapshot is the same file (same inode) as the first: it was "
            "rewritten in place, and a crash while it is written leaves half a snapshot; "
            "write a new file beside it and rename that over the old one"
        )
        exercise.save_atomic(_state(4), snapshot)
        got = _epochs_in(snapshot, "after the save that follows the interrupted one")
        assert got == 4, f"the save after an interrupted one wrote epochs_run={got}, not 4"
    return (
        "each save loads back and leaves nothing else behind, an interrupted save leaves "
        "the previous snapshot whole, and every save makes a new file"
    )


STOP_WORLD, STOP_STEPS = 3, 8
ASKED_FROM = {0: None, 1: 3, 2: 5}  # the step from which each rank has been asked


def _answers_to_stop(exercise) -> list[bool]:
    """Runs in each process: call the learner's function at every step, with this
    rank's flag, and keep every answer (no early exit: a wrong answer must not hang)."""
    first = ASKED_FROM[dist.get_rank()]
    return [
        bool(exercise.all_ranks_agree_to_stop(first is not None and step >= first))
        for step in range(STOP_STEPS)
    ]


def stop_agreement(path) -> str:
    answers = run_in_world(path, (__file__, "_answers_to_stop"), STOP_WORLD)
    expected = [step >= 3 for step in range(STOP_STEPS)]
    for rank, got in enumerate(answers):
        stops_at = got.index(True) if True in got else None
        assert got == expected, (
            f"rank {rank}: answered {got}, stopping at step {stops_at}; expected False at "
            "steps 0-2 and True from step 3 on, when rank 1 was asked (any rank asked is "
            "enough, and every rank must give the same answer)"
        )
    return (
        f"{STOP_WORLD} ranks, {STOP_STEPS} steps: all answered False until rank 1 was "
        "asked at step 3, then True, together"
    )
