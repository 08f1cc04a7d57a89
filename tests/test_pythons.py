"""course.pythons: the command that runs the suite on every promised Python runs the
README's own test command, reads pytest's verdict, and picks the Pythons it says."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from course import pythons


def test_it_runs_the_readmes_test_command():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"\*\*Install and run all tests\*\*.*?```bash\n(.*?)\n```", readme, re.S)
    assert pythons.test_command(Path("python3"), notebooks=False) == block
    notebooks = pythons.test_command(Path("/py/bin/python3"), notebooks=True)
    assert notebooks.startswith("/py/bin/python3 -m venv .venv && ")
    assert notebooks.endswith("-m pytest " + " ".join(pythons.LESSONS))
    assert sorted(pythons.LESSONS) == sorted(p.name for p in REPO.glob("0[0-9]_*") if p.is_dir())


@pytest.mark.parametrize("module", ["course.pythons", "course.system_packages"])
def test_what_ci_runs_before_the_venv_needs_only_the_standard_library(module):
    # .ci/run starts these with a bare python3: -S leaves out every installed package.
    bare = subprocess.run(
        [sys.executable, "-S", "-c", f"import {module}"], cwd=REPO, capture_output=True, text=True
    )
    assert bare.returncode == 0, bare.stderr


@pytest.mark.parametrize(
    "line, verdict",
    [
        (
            "==== 456 passed, 10 skipped in 639.12s (0:10:39) ====",
            ("456 passed, 10 skipped", "639.12"),
        ),
        ("= 1 failed, 455 passed in 701.00s (0:11:41) =", ("1 failed, 455 passed", "701.00")),
        ("====== 3 passed, 2 warnings in 0.41s ======", ("3 passed, 2 warnings", "0.41")),
        ("==== short test summary info ====", None),
    ],
)
def test_it_reads_pytests_last_line(line, verdict):
    match = pythons.SUMMARY.match(line)
    assert (match.groups() if match else None) == verdict


def test_newest_takes_a_newer_python_only(monkeypatch, capsys):
    class Args:
        newest, versions = True, []

    own = f"{sys.version_info.major}.{sys.version_info.minor}"
    newer = f"{sys.version_info.major}.{sys.version_info.minor + 1}"
    monkeypatch.setattr(pythons, "PROMISED", ("3.10", own, newer))
    monkeypatch.setattr(pythons, "find_python", lambda minor: (minor + ".0", Path("py")))
    assert pythons.chosen(Args) == [newer]
    monkeypatch.setattr(pythons, "find_python", lambda m: None if m == newer else (m, Path("py")))
    assert pythons.chosen(Args) == []
    assert f"{own} is the newest promised Python here" in capsys.readouterr().out
    monkeypatch.setattr(pythons, "find_python", lambda minor: None)
    assert pythons.chosen(Args) == []
    assert "none of the promised Pythons found" in capsys.readouterr().out


def test_an_interrupted_run_leaves_no_process_behind():
    """Processes in sessions of their own (as torchrun's workers are) carry the run's
    marker, and kill_marked finds them all, and only them."""
    marker = {"COURSE_PYTHONS_RUN": f"test-{os.getpid()}"}
    ours = [
        subprocess.Popen(["sleep", "60"], env={**os.environ, **marker}, start_new_session=True)
        for _ in range(2)
    ]
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        pythons.kill_marked(marker)
        assert [process.wait(timeout=10) for process in ours] == [-9, -9]
        assert other.poll() is None
    finally:
        for process in [*ours, other]:
            process.kill()
            process.wait()


def test_every_python_runs_the_commit_the_command_started_at(tmp_path, monkeypatch):
    """A commit made while the Pythons run one after another must not reach the later
    ones: each clone checks out the commit the run began with, not HEAD."""
    start = subprocess.run(
        ["git", "rev-parse", "HEAD~1"], cwd=pythons.REPO, capture_output=True, text=True
    ).stdout.strip()  # stands for the commit HEAD was at when the run began
    monkeypatch.setattr(
        pythons, "test_command", lambda interpreter, notebooks: "git rev-parse HEAD"
    )
    row = pythons.run_one("3.x", Path("python3"), False, tmp_path, start)
    assert (tmp_path / "3.x.log").read_text().splitlines()[-1] == start
    assert row["ok"] and row["torch"] == "not installed"
