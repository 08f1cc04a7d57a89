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


def test_every_python_file_stays_under_the_limit():
    lengths = {name: text.count("\n") for name, text in tracked_texts().items()}
    over = {name: n for name, n in lengths.items() if name.endswith(".py") and n > MAX_LINES}
    assert over == {}


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


# The rungs, and how many lines may change from one to the next in a raw `diff -u` (module
# docstrings included): about twice the official series' 40, 59 and 17. A notebook shows
# each rung's diff whole or in parts whose sum stays within it.
RUNGS = {
    ("02_multigpu/single_gpu.py", "02_multigpu/multigpu.py"): 90,
    ("02_multigpu/multigpu.py", "03_fault_tolerance/multigpu_torchrun.py"): 130,
    ("03_fault_tolerance/multigpu_torchrun.py", "03_fault_tolerance/multigpu_preemptible.py"): 90,
    ("03_fault_tolerance/multigpu_preemptible.py", "04_multinode/multinode.py"): 60,
}
# The lines that make a rung distributed, each marked `# DDP` (on it, or on the comment
# just above it), so that `grep "# DDP"` lists them in every rung.
DDP_LINES = ("init_process_group(", "DDP(self.model", "DistributedSampler(", "set_epoch(")


def changed_lines(diff: str) -> int:
    """The lines a unified diff removes or adds, as `grep -cE '^[-+][^-+]|^[-+]$'` counts
    them (the two file names left out)."""
    return len(re.findall(r"^[-+](?:[^-+\n].*)?$", diff, re.M))


def test_each_rung_changes_no_more_lines_than_its_target():
    sizes = {}
    for (old, new), target in RUNGS.items():
        raw = subprocess.run(["diff", "-u", old, new], cwd=REPO, capture_output=True, text=True)
        sizes[new] = (changed_lines(raw.stdout), target)
    assert {new: size for new, size in sizes.items() if size[0] > size[1]} == {}, sizes


def test_every_rung_marks_its_distributed_lines():
    for _, new in RUNGS:
        lines = (REPO / new).read_text().splitlines()
        for wanted in DDP_LINES:
            found = [number for number, line in enumerate(lines) if wanted in line]
            assert found, (new, wanted)
            for number in found:
                marked = [
                    line for line in lines[max(0, number - 2) : number + 1] if "# DDP" in line
                ]
                assert marked, (new, lines[number])


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


def test_the_parts_of_a_rung_a_notebook_shows_sum_to_no_more_than_its_target():
    diffs = shown_diffs()
    assert len(diffs) >= 5  # 02, 03 (two), 03 part 3, 04: the parser found them
    limits = {(REPO / old, REPO / new): target for (old, new), target in RUNGS.items()}
    shown = dict.fromkeys(limits, 0)
    for _, old, new, keywords in diffs:
        pair = (old.resolve(), new.resolve())
        assert pair in limits, f"a diff of {old.name} -> {new.name}, not a rung"
        shown[pair] += changed_lines(diff_text(old, new, **keywords))
    assert {pair: n for pair, n in shown.items() if n > limits[pair]} == {}, shown
