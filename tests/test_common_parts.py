"""A part of a notebook that cannot run here is skipped saying why, listed in pytest's
summary, and a failure under COURSE_STRICT=1 (common.parts, course/pytest_hooks.py)."""

import re

import pytest
from conftest import code_notebook, run_nbmake

from common import parts

CELL = 'from common import parts\nassert parts.unavailable("The demo part", "nothing to run it on")'


@pytest.fixture
def environment(monkeypatch):
    """Neither this session's record file nor CI's strict mode."""
    monkeypatch.delenv("COURSE_SKIPPED_PARTS", raising=False)
    monkeypatch.delenv("COURSE_STRICT", raising=False)


def test_a_part_that_can_run_says_nothing(environment, capsys):
    assert parts.unavailable("The demo part", None) is None
    assert capsys.readouterr().out == ""


def test_a_part_that_cannot_run_says_why_and_is_recorded(
    environment, monkeypatch, tmp_path, capsys
):
    record = tmp_path / "parts"
    monkeypatch.setenv("COURSE_SKIPPED_PARTS", str(record))
    monkeypatch.chdir(tmp_path)
    assert parts.unavailable("The demo part", "no Slurm here") == "no Slurm here"
    assert capsys.readouterr().out == "The demo part skipped: no Slurm here\n"
    assert record.read_text() == f"{tmp_path.name}: The demo part: no Slurm here\n"


@pytest.mark.parametrize("strict", [False, True], ids=["skipped", "strict"])
def test_pytest_lists_a_notebooks_skipped_part_or_fails_it(environment, tmp_path, strict):
    code_notebook(tmp_path / "demo.ipynb", CELL)
    strict_mode = {"COURSE_STRICT": "1"} if strict else {}
    result = run_nbmake(tmp_path, "-p", "course.pytest_hooks", "demo.ipynb", env=strict_mode)
    if strict:
        assert result.returncode == 1, result.stdout
        plain = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout)  # the kernel's colours
        assert "PartCannotRun: COURSE_STRICT=1, and The demo part cannot run" in plain, plain
    else:
        assert result.returncode == 0, result.stdout
        line = f"SKIPPED PART {tmp_path.name}: The demo part: nothing to run it on"
        assert line in result.stdout.splitlines(), result.stdout
