"""The suite's own pytest hooks (pyproject's addopts loads them with `-p`).

Two things pytest does not do by itself (and course.kernels, a plugin of its own,
gives nbmake's notebooks the course's kernels):

- Let a notebook's cell limit be the limit that applies. nbmake stops each cell at the
  notebook's cell limit (`metadata.execution.timeout`, else `--nbmake-timeout`); the
  notebook is one pytest item, and pytest-timeout's per-item limit (`timeout` in
  pyproject) would stop a notebook whose cells run long before any cell reached its own
  limit. A notebook item gets, instead, its number of code cells times the cell limit:
  no longer than nbmake can let it run.
- Show the parts of notebooks that were skipped (common.parts): nbmake reports a
  notebook as passed or failed, nothing in between. The notebooks' kernels write them
  to the file COURSE_SKIPPED_PARTS names; the summary lists them.
"""

import json
import os
import shutil
import tempfile

import pytest


def notebook_limit(path, default_cell_limit: int) -> int:
    """Seconds nbmake can let the notebook at `path` run: its code cells times its cell limit."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    cell_limit = nb["metadata"].get("execution", {}).get("timeout", default_cell_limit)
    return cell_limit * sum(cell["cell_type"] == "code" for cell in nb["cells"])


def pytest_collection_modifyitems(config, items):
    default_cell_limit = config.getoption("nbmake_timeout", default=None)
    for item in items:
        if item.path.suffix == ".ipynb" and default_cell_limit is not None:
            item.add_marker(pytest.mark.timeout(notebook_limit(item.path, default_cell_limit)))


def pytest_configure(config):
    # Set once, before xdist starts its workers: they, and the kernels they start,
    # inherit it. A pytest run inside a test finds it set, and leaves it to its owner.
    if not hasattr(config, "workerinput") and "COURSE_SKIPPED_PARTS" not in os.environ:
        config.skipped_parts_folder = tempfile.mkdtemp(prefix="course-skipped-parts-")
        os.environ["COURSE_SKIPPED_PARTS"] = os.path.join(config.skipped_parts_folder, "parts")


def pytest_terminal_summary(terminalreporter, config):
    folder = getattr(config, "skipped_parts_folder", None)
    if folder is None:
        return
    record = os.path.join(folder, "parts")
    if os.path.exists(record):
        terminalreporter.section("parts of notebooks skipped (COURSE_STRICT=1 fails them)")
        with open(record, encoding="utf-8") as file:
            for line in file:
                terminalreporter.line(f"SKIPPED PART {line.rstrip()}")
    shutil.rmtree(folder, ignore_errors=True)
    del os.environ["COURSE_SKIPPED_PARTS"]
