"""Lesson 00: its notebook failing when the script fails. (What every rank of the
hello-world job reports, with 2 and 3 processes, the notebook's own check cell asserts.)"""

import shutil

from conftest import REPO, run_nbmake

LESSON = REPO / "00_intro"


def test_the_notebook_fails_when_its_script_fails(tmp_path):
    lesson = tmp_path / "00_intro"
    shutil.copytree(LESSON, lesson, ignore=shutil.ignore_patterns("*.pt", "__pycache__"))
    script = lesson / "hello_torchrun.py"
    script.write_text(
        script.read_text().replace(
            "    dist.destroy_process_group()\n", "    raise SystemExit(7)\n"
        )
    )
    result = run_nbmake(
        tmp_path,
        "--nbmake-timeout=120",
        "-p",
        "no:xdist",
        "-o",
        "addopts=",
        str(lesson / "00_intro.ipynb"),
        timeout=600,
    )
    assert result.returncode == 1, result.stdout[-3000:]
    assert "CommandFailed" in result.stdout
    assert "exited with status 1" in result.stdout  # torchrun reports the worker's failure
