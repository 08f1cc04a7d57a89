"""The suite's own pytest hooks (pyproject's addopts loads them with `-p`).

Three things pytest does not do by itself (and course.kernels, a plugin of its own,
gives nbmake's notebooks the course's kernels):

- Run the slowest items first. With two workers, a long item that starts last keeps
  one worker busy while the other idles. pytest's own order cannot be set from
  `testpaths`: pytest 9 folds a file named there into its folder, and the folder's
  files come in alphabetical order.
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

# Node id prefixes, slowest first, from CI's --durations at 1e70fb4 (seconds of one
# run on 2 cores, under the suite's load). Items not named keep pytest's order after them.
SLOWEST_FIRST = [
    "05_mingpt/05_mingpt.ipynb",  # 240
    "04_multinode/04_multinode.ipynb",  # 209
    "tests/test_05_training.py",  # 196 + 162 + 88 (setup)
    "02_multigpu/02_multigpu_wrapper_options.ipynb",  # 184
    "02_multigpu/02_multigpu.ipynb",  # 168
    "04_multinode/04_multinode_hangs.ipynb",  # 167
    "tests/test_05_global_batch.py::test_fp16",  # 133
    "03_fault_tolerance/03_fault_tolerance_preemption.ipynb",  # 130
    "03_fault_tolerance/03_fault_tolerance.ipynb",  # 127
    "02_multigpu/02_multigpu_topics.ipynb",  # 122
    "01_theory/01_theory.ipynb",  # 97
    "01_theory/01_theory_at_scale.ipynb",  # 97
    "03_fault_tolerance/03_fault_tolerance_elastic.ipynb",  # 96
    "00_intro/00_intro.ipynb",
    "tests/test_04_multinode.py",
    "tests/test_benchmarks.py",
    "tests/test_03_shared_store.py",
    "tests/test_05_slurm.py",
    "tests/test_site.py",
]


def slowness_rank(nodeid: str) -> int:
    """The place of the first prefix in SLOWEST_FIRST that names this item; after all
    of them if none does."""
    for place, prefix in enumerate(SLOWEST_FIRST):
        if nodeid.startswith(prefix):
            return place
    return len(SLOWEST_FIRST)


def notebook_limit(path, default_cell_limit: int) -> int:
    """Seconds nbmake can let the notebook at `path` run: its code cells times its cell limit."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    cell_limit = nb["metadata"].get("execution", {}).get("timeout", default_cell_limit)
    return cell_limit * sum(cell["cell_type"] == "code" for cell in nb["cells"])


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: slowness_rank(item.nodeid))  # stable: ties keep their order
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
