"""Where the course is and which lessons it has: what `build`, `site` and `slides`
share (each imports this, none imports another for it)."""

import ast
import re
import sys
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parent.parent


def lesson_notebooks(names: list[str]) -> list[Path]:
    """The lesson notebooks, in course order: `NN_topic/NN_*.ipynb`."""
    notebooks = sorted(REPO.glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb"))
    if names:
        unknown = set(names) - {nb.parent.name for nb in notebooks}
        if unknown:
            lessons = ", ".join(sorted({nb.parent.name for nb in notebooks}))
            sys.exit(f"no lesson named {', '.join(sorted(unknown))}; the lessons are: {lessons}")
        notebooks = [nb for nb in notebooks if nb.parent.name in names]
    return notebooks


# A call in a notebook's code that launches something (common.launch and 04's helpers).
LAUNCH = re.compile(r"\b(run|start|two_nodes|hang)\(")


def declaration(notebook: Path) -> dict:
    """The keyword arguments of the notebook's `choose(...)` (common.notebook_device), read
    from its code cells before its first launch."""
    nb = nbformat.read(notebook, as_version=4)
    code = [cell.source for cell in nb.cells if cell.cell_type == "code"]
    first_launch = next(i for i, source in enumerate(code) if LAUNCH.search(source))
    for source in code[:first_launch]:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "choose":
                return {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    raise ValueError(f"{notebook.name}: no choose(...) before its first launch")
