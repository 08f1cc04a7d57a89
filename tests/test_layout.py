"""The shape of the code a learner reads: a file per idea, under about 300 lines; `common/`
(what lessons share) never reaches into `course/` (the course's machinery); no two
modules of the project import each other, directly or around a circle (import-linter's
contracts in pyproject.toml)."""

import ast
import json
import re
import subprocess
from pathlib import Path

from conftest import PYTHON, REPO, tracked_texts

from common.source import diff_text

MAX_LINES = 300
# A file over the limit, and why it is still one file. Each entry is a debt: the issue
# that will split it, or the reason it reads best whole.
OVER_THE_LIMIT = {
    "04_multinode/multinode.py": (
        "lesson 03's multigpu_preemptible.py and the changes for several nodes, "
        "which the notebook shows as a diff from it; its setup is written out as 03's"
    ),
}


def python_files() -> list[str]:
    return [name for name in tracked_texts() if name.endswith(".py")]


def test_every_file_stays_under_the_limit_or_says_why():
    lengths = {name: text.count("\n") for name, text in tracked_texts().items()}
    over = {name for name in python_files() if lengths[name] > MAX_LINES}
    assert over == set(OVER_THE_LIMIT), {name: lengths[name] for name in over}


def test_the_import_contracts_are_kept():
    """pyproject.toml's [tool.importlinter] contracts, checked by import-linter (imports
    inside functions count too)."""
    lint_imports = Path(PYTHON).parent / "lint-imports"
    result = subprocess.run([lint_imports, "--no-cache"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_common_lists_every_module_it_holds():
    """common/__init__'s docstring is the map of what the lessons share: each module in it."""
    listed = set(re.findall(r"`(\w+)`", (REPO / "common" / "__init__.py").read_text()))
    modules = {path.stem for path in (REPO / "common").glob("*.py")} - {"__init__"}
    assert modules - listed == set()


# A diff a notebook shows is one idea's change: about 100 changed lines at most (issue 33;
# the largest, 02's single_gpu.py -> multigpu.py, changes 113).
MAX_SHOWN_DIFF = 115


def shown_diffs() -> list[tuple[str, Path, Path, dict]]:
    """Every `show_diff(...)` in a notebook's code cells: the notebook, the two scripts
    (relative to the notebook's folder, as the cell reads them) and its keywords."""
    found = []
    for name, text in tracked_texts().items():
        if not name.endswith(".ipynb"):
            continue
        folder = (REPO / name).parent
        for cell in json.loads(text)["cells"]:
            if cell["cell_type"] != "code":
                continue
            source = "".join(cell["source"])
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "show_diff":
                    old, new = (folder / ast.literal_eval(arg) for arg in node.args[:2])
                    keywords = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
                    found.append((name, old, new, keywords))
    return found


def test_every_diff_a_notebook_shows_is_one_ideas_change():
    diffs = shown_diffs()
    assert len(diffs) >= 5  # 02, 03 (two), 03 part 3, 04: the parser found them
    sizes = {}
    for notebook, old, new, keywords in diffs:
        diff = diff_text(old, new, **keywords)
        lines = diff.splitlines()[2:]  # after the two file names
        changed = [line for line in lines if line.startswith(("+", "-"))]
        sizes[f"{notebook}: {old.name} -> {new.name} {keywords}"] = len(changed)
    assert {shown: size for shown, size in sizes.items() if size > MAX_SHOWN_DIFF} == {}
