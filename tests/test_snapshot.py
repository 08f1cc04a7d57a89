"""Snapshots: atomic writes, and one clear line for files that are not snapshots."""

import subprocess
import sys

import pytest
import torch
from conftest import SCRIPTS

from common.snapshot import SnapshotError, load, save_atomic, temporary_path

KEYS = ("model", "epochs_run")


def state(epochs_run: int) -> dict:
    return {"model": {"weight": torch.full((3,), float(epochs_run))}, "epochs_run": epochs_run}


def test_round_trip(tmp_path):
    path = tmp_path / "deep" / "snapshot.pt"
    save_atomic(state(4), path)
    loaded = load(path, KEYS)
    assert loaded["epochs_run"] == 4 and torch.equal(
        loaded["model"]["weight"], torch.full((3,), 4.0)
    )
    assert not temporary_path(path).exists()


def test_a_writer_killed_mid_write_leaves_the_previous_snapshot(tmp_path):
    """A process that is SIGKILLed while torch.save is writing leaves the old snapshot."""
    path = tmp_path / "snapshot.pt"
    save_atomic(state(1), path)
    killer = SCRIPTS / "die_mid_snapshot.py"
    result = subprocess.run([sys.executable, killer, path], capture_output=True, text=True)
    assert result.returncode == -9, result.stderr  # it really died by SIGKILL
    assert temporary_path(path).exists()  # mid-write: the partial file is there
    assert temporary_path(path).stat().st_size > 0
    assert load(path, KEYS)["epochs_run"] == 1  # and the snapshot is the old, whole one
    save_atomic(state(3), path)  # the next save simply replaces the leftover
    assert load(path, KEYS)["epochs_run"] == 3 and not temporary_path(path).exists()


def one_line_error(path) -> str:
    with pytest.raises(SnapshotError) as error:
        load(path, KEYS)
    message = str(error.value)
    assert "\n" not in message and str(path) in message and f"delete {path}" in message
    return message


def test_empty_file(tmp_path):
    path = tmp_path / "snapshot.pt"
    path.touch()
    assert "is empty" in one_line_error(path)


def test_truncated_file(tmp_path):
    path = tmp_path / "snapshot.pt"
    save_atomic(state(1), path)
    path.write_bytes(path.read_bytes()[:200])
    assert "cannot be read" in one_line_error(path)


def test_foreign_file(tmp_path):
    path = tmp_path / "snapshot.pt"
    path.write_text("these are my holiday notes\n")
    assert "cannot be read" in one_line_error(path)


def test_a_pickle_with_code_is_refused(tmp_path):
    path = tmp_path / "snapshot.pt"
    torch.save({"model": {}, "epochs_run": 1, "evil": subprocess.Popen}, path)
    assert "cannot be read" in one_line_error(path)


def test_someone_elses_checkpoint(tmp_path):
    path = tmp_path / "snapshot.pt"
    torch.save({"state_dict": {"w": torch.ones(1)}}, path)
    assert "is not a snapshot of this script (it has no model, epochs_run)" in one_line_error(path)
