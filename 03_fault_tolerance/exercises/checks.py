"""Checks of lesson 03's coding exercises; `course.exercises.check` runs them."""

import contextlib
import os
import tempfile
from pathlib import Path
from unittest import mock

import torch
import torch.distributed as dist

from course.exercises import load, run_in_world

SNAPSHOT = "snapshot.pt"


class SimulatedCrash(RuntimeError):
    """What an interrupted save raises (see `_Interrupt`)."""


class _Interrupt:
    """Pickling this raises: a save of a state that holds one stops half-way, the way a
    crash would (after the file was opened and part of the state written)."""

    def __reduce__(self):
        raise SimulatedCrash("the save was interrupted here (a simulated crash)")


def _state(epochs_run: int) -> dict:
    return {"model": {"weight": torch.full((1000,), float(epochs_run))}, "epochs_run": epochs_run}


def _epochs_in(path: Path, when: str) -> int:
    try:
        state = torch.load(path, weights_only=True)
    except Exception as error:
        raise AssertionError(f"{when}, {path.name} cannot be loaded: {error}") from None
    return state["epochs_run"]


def _caused_by_the_crash(error: BaseException | None) -> bool:
    """The simulated crash, or an error raised while handling it: a save may clean up
    and raise an error of its own (`raise ... from error`), which is as good."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, SimulatedCrash):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


@contextlib.contextmanager
def _recording_fsyncs(folder: Path, synced: list):
    """While active, os.fsync (and os.fdatasync, which also puts a file's bytes on the
    disk) note each file they are given: (its identity, its size then, its names in
    `folder`, none when it is elsewhere). Sizes and names are taken at that moment,
    because they are what says whether the bytes of the future snapshot reached the disk
    before its name did; the identity is only compared within one save (a deleted
    file's inode number can be reused by the next)."""

    def recording(real):
        def sync(fd):
            status = os.fstat(fd if isinstance(fd, int) else fd.fileno())
            names = [p.name for p in folder.iterdir() if os.path.samestat(p.stat(), status)]
            synced.append(((status.st_dev, status.st_ino), status.st_size, names))
            return real(fd)

        return sync

    with contextlib.ExitStack() as stack:
        for name in ("fsync", "fdatasync"):
            if hasattr(os, name):  # macOS has no fdatasync
                stack.enter_context(mock.patch.object(os, name, recording(getattr(os, name))))
        yield


def _sync_problem(snapshot: Path, synced: list, when: str) -> str | None:
    """What is wrong with how the file now named `snapshot` reached the disk, or None: it
    must have been fsynced whole, beside the snapshot, before it was renamed to it."""
    status = snapshot.stat()
    mine = [(size, names) for key, size, names in synced if key == (status.st_dev, status.st_ino)]
    before = [(size, names) for size, names in mine if SNAPSHOT not in names]
    whole = [names for size, names in before if size == status.st_size]
    if not mine:
        return (
            f"{when}, {SNAPSHOT} was never passed to os.fsync: its name can reach the disk "
            "before its bytes, and a power cut then leaves a snapshot that cannot be read; "
            "flush the temporary file and os.fsync(file.fileno()) before os.replace"
        )
    if not before:
        return (
            f"{when}, {SNAPSHOT} was fsynced only after os.replace had named it: fsync the "
            "temporary file before the rename, so that its bytes are on the disk before its name"
        )
    if not whole:
        return (
            f"{when}, {SNAPSHOT} had {max(size for size, _ in before)} of its "
            f"{status.st_size} bytes when it was fsynced: what was written after os.fsync may "
            "not be on the disk; write the whole state and flush the file, then fsync it"
        )
    if not any(whole):
        return (
            f"{when}, the file that became {SNAPSHOT} was not in its folder when it was "
            f"fsynced: write the temporary file beside {SNAPSHOT} (e.g. {SNAPSHOT}.tmp), since "
            "os.replace is atomic only within one filesystem and fails across two (the "
            "system temp folder is often another one than a cluster job's snapshot folder)"
        )
    return None


def _left_behind(folder: Path, system_temp: Path, when: str, advice: str) -> None:
    left = sorted(p.name for p in folder.iterdir())
    assert left == [SNAPSHOT], (
        f"{when}, the folder should hold only {SNAPSHOT}, it holds {left}{advice}"
    )
    left = sorted(p.name for p in system_temp.iterdir())
    assert left == [], (
        f"{when}, the system temp folder (tempfile.gettempdir()) holds {left}: write the "
        f"temporary file beside {SNAPSHOT} (a rename is atomic only within one filesystem), "
        "and leave nothing behind"
    )


def atomic_save(path) -> str:
    exercise = load(path)
    with tempfile.TemporaryDirectory(prefix="atomic-save-") as root:
        folder, system_temp = Path(root, "run"), Path(root, "tmp")
        folder.mkdir()
        system_temp.mkdir()
        snapshot = folder / SNAPSHOT
        # The learner's tempfile calls land in a system temp folder of the check's own,
        # which it can then search for what a save left behind.
        with mock.patch.object(tempfile, "tempdir", str(system_temp)):
            return _atomic_save(exercise, snapshot, system_temp)


def _atomic_save(exercise, snapshot: Path, system_temp: Path) -> str:
    inodes = []
    # How each save's bytes reached the disk is judged right after it (an inode number
    # means one file only until that file is deleted), but reported last: a snapshot
    # that a killed process destroys is the first thing to fix.
    sync_problems = []

    def save(state: dict, when: str, advice: str = "") -> None:
        synced = []
        with _recording_fsyncs(snapshot.parent, synced):
            exercise.save_atomic(state, snapshot)
        got = _epochs_in(snapshot, when)
        assert got == state["epochs_run"], (
            f"{when}, the snapshot holds epochs_run={got}, not {state['epochs_run']}"
        )
        _left_behind(snapshot.parent, system_temp, when, advice)
        sync_problems.append(_sync_problem(snapshot, synced, when))
        inodes.append(snapshot.stat().st_ino)

    save(_state(1), "after save number 1")
    save(_state(2), "after save number 2")
    try:
        exercise.save_atomic({**_state(3), "crash": _Interrupt()}, snapshot)
    except Exception as error:
        if not _caused_by_the_crash(error):
            raise AssertionError(
                f"the interrupted save raised {type(error).__name__}: {error}; expected the "
                "simulated crash, or an error of yours raised from it"
            ) from error
    else:
        raise AssertionError(
            "the interrupted save returned as if it had saved: let the error reach the "
            "caller (after cleaning up, if you like), which would otherwise go on as if "
            "its state were safe"
        )
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
    save(
        _state(4),
        "after the save that follows an interrupted one",
        ": the interrupted save left its temporary file, under a name the next save does "
        "not reuse; use a fixed name (snapshot.pt.tmp), or delete it when a save fails",
    )
    problem = next((problem for problem in sync_problems if problem), None)
    assert problem is None, problem
    return (
        "each save loads back, was fsynced beside the snapshot before the rename and "
        "leaves nothing else behind; an interrupted save leaves the previous snapshot "
        "whole; every save makes a new file"
    )


STOP_WORLD, STOP_STEPS = 3, 8
ASKED_FROM = {0: None, 1: 3, 2: 5}  # the step from which each rank has been asked


def _answers_to_stop(exercise) -> list[bool | str]:
    """Runs in each process: call the learner's function at every step, with this
    rank's flag, and keep every answer (no early exit: a wrong answer must not hang).
    An answer that is not a bool comes back described, for the check's message."""
    first = ASKED_FROM[dist.get_rank()]
    answers = []
    for step in range(STOP_STEPS):
        answer = exercise.all_ranks_agree_to_stop(first is not None and step >= first)
        if not isinstance(answer, bool):
            answer = f"{answer!r} (a {type(answer).__name__})"
        answers.append(answer)
    return answers


def stop_agreement(path) -> str:
    answers = run_in_world(path, (__file__, "_answers_to_stop"), STOP_WORLD)
    expected = [step >= 3 for step in range(STOP_STEPS)]
    for rank, got in enumerate(answers):
        # The task (and `-> bool`) asks for a bool: a one-element tensor passes an `if`
        # like one, but it is not one.
        described = next((answer for answer in got if isinstance(answer, str)), None)
        assert described is None, (
            f"rank {rank} returned {described}, not a bool: return the agreed answer as "
            "True or False, as `-> bool` says"
        )
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
