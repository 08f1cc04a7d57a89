"""The time limit a reader sees in a notebook cell is the one that applies.

A cell launches scripts with time limits written in it (`run(..., timeout=900)`,
`job.wait(120)`, `job.wait_for(pattern, 60)`, or `run`'s default of 180 s). nbmake and
`course.build` stop a whole cell at the notebook's cell limit (`metadata.execution.timeout`,
else pytest's `--nbmake-timeout`). If that were shorter than the limits written in the
cell, the cell would be killed first and the reader's numbers would be false. So every
notebook's cell limit must exceed the sum of the limits written in any of its cells, with
a margin for the cell's own work. A limit inside a loop counts once per pass: its line,
or the loop's line just above it, says how many, as `# 11 launches: 440 s at most`, and
that sum is the one counted.

pytest-timeout's per-item limit must not cut a notebook short either: course/pytest_hooks.py
gives each notebook item its code cells times its cell limit, tested at the end.
"""

import json
import re
from pathlib import Path

import nbformat
import pytest
from conftest import run_nbmake

from course.build import CELL_TIMEOUT_SECONDS, cell_limit

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(REPO.glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb"))
RUN_DEFAULT_SECONDS = 180  # common.launch.run's default limit
MARGIN_SECONDS = 60
LOOP = re.compile(r"#\s*(\d+) launches: (\d+) s at most")
LIMITS = [
    re.compile(r"timeout=(\d+)"),  # run(..., timeout=60), job.wait_for(..., timeout=60)
    re.compile(r"\bwait\((\d+)"),  # job.wait(120)
    re.compile(r"\bwait_for\((?:[^()]|\([^()]*\))*?,\s*(\d+)\s*[,)]"),  # job.wait_for(p, 120)
]


def written_limits(source: str) -> int:
    """Seconds of launch limits a cell shows: each limit written in it, the sum a loop's
    line declares instead of its own limit, and 180 s for every `run(` that gives none."""
    total, declared = 0, False
    for line in source.splitlines():
        loop = LOOP.search(line)
        limits = [int(seconds) for limit in LIMITS for seconds in limit.findall(line)]
        if loop:
            total += int(loop[2])
            declared = not limits  # the limit is on the next line that has one
        elif declared and limits:
            declared = False  # counted in the declaration
        else:
            total += sum(limits)
    runs_without = sum(
        "timeout=" not in call for call in re.findall(r"\brun\((?:[^()]|\([^()]*\))*\)", source)
    )
    return total + RUN_DEFAULT_SECONDS * runs_without


def pytest_cell_limit() -> int:
    addopts = (REPO / "pyproject.toml").read_text()
    return int(re.search(r"--nbmake-timeout=(\d+)", addopts).group(1))


def loop_lines():
    """(notebook, line) for every line that declares a loop's launches, with the next
    line when the declaration is on the loop's line."""
    for notebook in NOTEBOOKS:
        for cell in json.loads(notebook.read_text())["cells"]:
            lines = "".join(cell["source"]).splitlines()
            for number, line in enumerate(lines):
                if LOOP.search(line):
                    yield notebook.name, "\n".join(lines[number : number + 2])


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: path.name)
def test_the_cell_limit_exceeds_the_limits_written_in_every_cell(notebook):
    nb = nbformat.read(notebook, as_version=4)
    limit = cell_limit(nb)  # the build's, and nbmake's: the test below
    for number, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            shown = written_limits(cell.source)
            assert shown + MARGIN_SECONDS <= limit, (
                f"cell {number} shows {shown} s of launch limits, but the notebook's cell "
                f"limit is {limit} s: set metadata.execution.timeout to at least "
                f"{shown + MARGIN_SECONDS}"
            )


def test_a_loop_declares_its_launches_times_its_limit():
    lines = list(loop_lines())
    assert lines, "no notebook declares a loop's launches: the pattern no longer matches"
    for name, line in lines:
        count, total = map(int, LOOP.search(line).groups())
        first = line.splitlines()[0]
        limited = first if any(limit.search(first) for limit in LIMITS) else line
        limits = [int(seconds) for limit in LIMITS for seconds in limit.findall(limited)]
        assert limits and count * max(limits) == total, f"{name}: {line.strip()}"


def test_the_build_applies_the_same_cell_limit_as_nbmake():
    # Both read a notebook's own limit from metadata.execution.timeout (the test above
    # fails if the build ignored it); without one, both apply the same default.
    assert CELL_TIMEOUT_SECONDS == pytest_cell_limit()


NOTEBOOK_OF_TWO_NAPS = {
    "cells": [
        {
            "cell_type": "code",
            "execution_count": None,
            "metadata": {},
            "outputs": [],
            "source": "import time\ntime.sleep(2)",
        }
    ]
    * 2,
    "metadata": {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
    },
    "nbformat": 4,
    "nbformat_minor": 5,
}


@pytest.mark.parametrize("hooks", [True, False], ids=["with the hooks", "without"])
def test_a_notebook_may_run_as_long_as_its_cells_limits_allow(tmp_path, hooks):
    # Two cells of 2 s under a cell limit of 10 s, and pytest-timeout's limit of 3 s per
    # item: the notebook passes only if the hooks give it its cells' 20 s.
    (tmp_path / "naps.ipynb").write_text(json.dumps(NOTEBOOK_OF_TWO_NAPS))
    result = run_nbmake(
        tmp_path,
        "--nbmake-timeout=10",
        "-o",
        "timeout=3",
        *(["-p", "course.pytest_hooks"] if hooks else []),
        "naps.ipynb",
    )
    if hooks:
        assert result.returncode == 0, result.stdout + result.stderr
    else:
        assert result.returncode == 1 and "Timeout" in result.stdout, result.stdout
