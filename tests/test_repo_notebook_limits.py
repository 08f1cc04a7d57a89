"""The time limit a reader sees in a notebook cell is the one that applies: a notebook's
cell limit (`metadata.execution.timeout`, else `--nbmake-timeout`), at which nbmake and
`course.build` stop a cell, exceeds the sum of the launch limits written in any of its cells
(`run(..., timeout=900)`, `job.wait(120)`, `job.wait_for(pattern, 60)`, `run`'s default of
180 s), with a margin for the cell's own work; a limit inside a loop counts as its line, or
the loop's line above it, declares (`# 11 launches: 440 s at most`). pytest-timeout gives a
notebook its code cells times its cell limit (course/pytest_hooks.py)."""

import re

import nbformat
import pytest
from conftest import REPO, code_notebook, run_nbmake

from course.build import CELL_TIMEOUT_SECONDS, cell_limit

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
    # Each line that declares a loop's launches, with the next when that is the loop's line.
    lines = [
        (notebook.name, "\n".join(source[number : number + 2]))
        for notebook in NOTEBOOKS
        for cell in nbformat.read(notebook, as_version=4).cells
        for source in [cell.source.splitlines()]
        for number, line in enumerate(source)
        if LOOP.search(line)
    ]
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
    addopts = (REPO / "pyproject.toml").read_text()
    assert CELL_TIMEOUT_SECONDS == int(re.search(r"--nbmake-timeout=(\d+)", addopts)[1])


@pytest.mark.parametrize("hooks", [True, False], ids=["with the hooks", "without"])
def test_a_notebook_may_run_as_long_as_its_cells_limits_allow(tmp_path, hooks):
    # Two cells of 2 s under a cell limit of 10 s, and pytest-timeout's limit of 3 s per
    # item: the notebook passes only if the hooks give it its cells' 20 s.
    code_notebook(tmp_path / "naps.ipynb", *["import time\ntime.sleep(2)"] * 2)
    plugin = ["-p", "course.pytest_hooks"] if hooks else []
    result = run_nbmake(tmp_path, "--nbmake-timeout=10", "-o", "timeout=3", *plugin, "naps.ipynb")
    if hooks:
        assert result.returncode == 0, result.stdout + result.stderr
    else:
        assert result.returncode == 1 and "Timeout" in result.stdout, result.stdout
