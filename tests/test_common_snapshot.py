"""Snapshots: atomic writes (also with several writers at once), and one clear line for
files that are not snapshots."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import PYTHON, REPO, SCRIPTS

from common.snapshot import SnapshotError, load, save_atomic, temporary_files
from course.exercises import evaluate

KEYS = ("model", "epochs_run")


def state(epochs_run: int) -> dict:
    return {"model": {"weight": torch.full((3,), float(epochs_run))}, "epochs_run": epochs_run}


def test_a_writer_killed_mid_write_leaves_the_previous_snapshot(tmp_path):
    """A process SIGKILLed while torch.save is writing leaves the old snapshot."""
    path = tmp_path / "deep" / "snapshot.pt"  # a folder that save_atomic makes
    save_atomic(state(1), path)
    assert torch.equal(load(path, KEYS)["model"]["weight"], torch.full((3,), 1.0))
    assert sorted(path.parent.iterdir()) == [path]  # no temporary file left
    killer = subprocess.Popen([sys.executable, SCRIPTS / "die_mid_snapshot.py", path])
    assert killer.wait() == -9  # it really died by SIGKILL
    # Mid-write: its partial file is there, named after the dead writer ...
    [leftover] = temporary_files(path)
    assert leftover.name.startswith(f".snapshot.pt.{killer.pid}.") and leftover.stat().st_size
    assert load(path, KEYS)["epochs_run"] == 1  # ... and the snapshot is the old, whole one
    save_atomic(state(3), path)  # the next save is not disturbed by the leftover
    assert load(path, KEYS)["epochs_run"] == 3 and temporary_files(path) == [leftover]


def test_save_atomic_passes_the_exercise_check_a_learners_save_must_pass():
    """Held to what lesson 03's atomic_save exercise asks of a learner's, by its check."""
    verdict = evaluate("03_fault_tolerance", "atomic_save", REPO / "common" / "snapshot.py")
    assert verdict.startswith("correct: "), verdict


def test_the_rename_reaches_the_disk_too(tmp_path, monkeypatch):
    """After the file's bytes, the folder, once renamed: the new name survives a power cut
    too. (The exercise asks a learner's save for the file's fsync only.)"""
    path = tmp_path / "snapshot.pt"
    save_atomic(state(1), path)
    synced, real_fsync = [], os.fsync

    def recording(fd):
        what = "folder" if os.path.samestat(os.fstat(fd), tmp_path.stat()) else "file"
        synced.append((what, load(path, KEYS)["epochs_run"]))  # what the name holds then
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    save_atomic(state(2), path)
    assert synced == [("file", 1), ("folder", 2)]


# Saves a 1 MB state many times once told "go"; prints each save's span (monotonic clock).
WRITER = """
import json, sys, time
import torch
from common.snapshot import save_atomic
path, value, saves = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
state = {"model": {"weight": torch.full((2**18,), float(value))}, "epochs_run": value}
print("ready", flush=True)
sys.stdin.readline()
spans = []
for _ in range(saves):
    began = time.monotonic()
    save_atomic(state, path)
    spans.append((began, time.monotonic()))
print(json.dumps(spans), flush=True)
"""


def test_two_writers_of_one_path_never_leave_a_mixed_file(tmp_path):
    """Two processes save different states to one path at once, as lesson 04's nodes do
    on a shared folder: every read in between, and the final file, is one writer's whole."""
    path, saves = tmp_path / "snapshot.pt", 40
    pipe = subprocess.PIPE
    options = dict(stdin=pipe, stdout=pipe, stderr=pipe, text=True, cwd=tmp_path)
    command = [PYTHON, "-c", WRITER, str(path)]
    writers = {v: subprocess.Popen([*command, str(v), str(saves)], **options) for v in (1, 2)}
    reads, spans = [], {}
    try:
        for writer in writers.values():
            assert writer.stdout.readline() == "ready\n", writer.stderr.read()
        for writer in writers.values():  # both start together: no sleep, a line on a pipe
            writer.stdin.write("go\n")
            writer.stdin.flush()
        while any(writer.poll() is None for writer in writers.values()):
            if path.exists():
                reads.append(load(path, KEYS))  # a mixed or half file would raise here
        for value, writer in writers.items():
            out, err = writer.communicate(timeout=120)
            assert writer.returncode == 0, err
            spans[value] = json.loads(out)
    finally:
        for writer in writers.values():
            writer.kill()
            writer.communicate()
    # The writers really overlapped: some save of one ran while the other was saving.
    assert any(a0 < b1 and b0 < a1 for a0, a1 in spans[1] for b0, b1 in spans[2]), spans
    for snapshot in [*reads, load(path, KEYS)]:
        value = snapshot["epochs_run"]
        assert value in (1, 2) and torch.equal(
            snapshot["model"]["weight"], torch.full((2**18,), float(value))
        )
    assert sorted(tmp_path.iterdir()) == [path]  # each writer cleaned up after itself


def truncated(path):
    save_atomic(state(1), path)
    path.write_bytes(path.read_bytes()[:300])


CANNOT_BE_READ = "snapshot {path} cannot be read ("
BAD_FILES = {  # how each kind of bad file is made, and how load()'s line about it begins
    "empty": (Path.touch, "snapshot {path} is empty; delete {path} to start"),
    "truncated": (truncated, CANNOT_BE_READ),
    "foreign": (lambda path: path.write_text("these are my holiday notes\n"), CANNOT_BE_READ),
    "a pickle with code": (
        lambda path: torch.save({"model": {}, "epochs_run": 1, "evil": subprocess.Popen}, path),
        CANNOT_BE_READ,
    ),
    "someone else's checkpoint": (
        lambda path: torch.save({"state_dict": {"w": torch.ones(1)}}, path),
        "{path} is not a snapshot of this script (it has no model, epochs_run); delete {path}",
    ),
}


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_a_bad_file_gets_one_line_and_is_left_as_it_was(tmp_path, kind):
    """One line that names the file and says to delete it; the file is left to inspect."""
    make, begins = BAD_FILES[kind]
    path = tmp_path / "snapshot.pt"
    make(path)
    before = path.read_bytes()
    with pytest.raises(SnapshotError) as error:
        load(path, KEYS)
    message = str(error.value)
    assert message.startswith(begins.format(path=path)), message
    assert "\n" not in message and f"delete {path}" in message
    assert path.read_bytes() == before
