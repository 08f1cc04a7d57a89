"""The time limit a reader sees in a notebook cell is the one that applies.

A cell launches scripts with time limits written in it (`run(..., timeout=900)`, or
`run`'s default of 180 s). nbmake and `course.build` stop a whole cell at the notebook's
cell limit (`metadata.execution.timeout`, else pytest's `--nbmake-timeout`). If that
were shorter than the limits written in the cell, the cell would be killed first and
the reader's numbers would be false. So every notebook's cell limit must exceed the sum
of the limits written in any of its cells, with a margin for the cell's own work.
"""

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(REPO.glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb"))
RUN_DEFAULT_SECONDS = 180  # common.launch.run's default limit
MARGIN_SECONDS = 60


def written_limits(source: str) -> int:
    """Seconds of launch limits a cell shows: each `timeout=N`, and 180 s for every
    `run(` that gives none."""
    explicit = sum(int(seconds) for seconds in re.findall(r"timeout=(\d+)", source))
    runs_without = sum(
        "timeout=" not in call for call in re.findall(r"\brun\((?:[^()]|\([^()]*\))*\)", source)
    )
    return explicit + RUN_DEFAULT_SECONDS * runs_without


def pytest_cell_limit() -> int:
    addopts = (REPO / "pyproject.toml").read_text()
    return int(re.search(r"--nbmake-timeout=(\d+)", addopts).group(1))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: path.name)
def test_the_cell_limit_exceeds_the_limits_written_in_every_cell(notebook):
    nb = json.loads(notebook.read_text())
    limit = nb["metadata"].get("execution", {}).get("timeout", pytest_cell_limit())
    for number, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            shown = written_limits("".join(cell["source"]))
            assert shown + MARGIN_SECONDS <= limit, (
                f"cell {number} shows {shown} s of launch limits, but the notebook's cell "
                f"limit is {limit} s: set metadata.execution.timeout to at least "
                f"{shown + MARGIN_SECONDS}"
            )


def test_written_limits_counts_explicit_and_default_limits():
    assert written_limits('run("torchrun a.py", timeout=900)') == 900
    assert written_limits('run(f"python {x(1)}")\nrun("b", timeout=5)') == 185
    assert written_limits("a.wait(timeout=60)\nb.wait_for('x', timeout=1)") == 61


def test_the_build_applies_the_same_cell_limit_as_nbmake():
    import nbformat

    from course.build import CELL_TIMEOUT_SECONDS, cell_limit

    assert CELL_TIMEOUT_SECONDS == pytest_cell_limit()
    for notebook in NOTEBOOKS:
        nb = nbformat.read(notebook, as_version=4)
        expected = nb.metadata.get("execution", {}).get("timeout", pytest_cell_limit())
        assert cell_limit(nb) == expected
