"""The shape of the code a learner reads: a file per idea, under about 300 lines; `common/`
(what lessons share) never reaches into `course/` (the course's machinery); no two
modules of the project import each other, directly or around a circle."""

import ast
import json
import re
from pathlib import Path

from conftest import REPO, tracked_texts

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
PACKAGES = ("common", "course")


def python_files() -> list[str]:
    return [name for name in tracked_texts() if name.endswith(".py")]


def test_every_file_stays_under_the_limit_or_says_why():
    lengths = {name: text.count("\n") for name, text in tracked_texts().items()}
    over = {name for name in python_files() if lengths[name] > MAX_LINES}
    assert over == set(OVER_THE_LIMIT), {name: lengths[name] for name in over}


def imported_modules(path: Path) -> set[str]:
    """The project's modules (`common.x`, `course.y`, `course.cluster.z`) that a file
    imports, at its top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {name for name in names if name.split(".")[0] in PACKAGES}
    return {name for name in found if module_file(name)}


def module_file(name: str) -> Path | None:
    base = REPO / Path(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def import_graph() -> dict[str, set[str]]:
    graph = {}
    for name in python_files():
        if name.split("/")[0] in PACKAGES:
            module = name.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
            imports = imported_modules(REPO / name) - {module}
            # importing `course.cluster.slurm` runs `course.cluster` first: not a cycle
            graph[module] = {i for i in imports if not module.startswith(i + ".")}
    return graph


def test_common_never_imports_course():
    reaching = {
        module: sorted(i for i in imports if i.startswith("course"))
        for module, imports in import_graph().items()
        if module.startswith("common")
    }
    assert {module: found for module, found in reaching.items() if found} == {}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle, each once, as the list of modules around it."""
    found, done = [], set()

    def visit(module, path):
        if module in path:
            circle = path[path.index(module) :]
            if frozenset(circle) not in done:
                done.add(frozenset(circle))
                found.append([*circle, module])
            return
        for imported in sorted(graph.get(module, ())):
            visit(imported, [*path, module])

    for module in sorted(graph):
        visit(module, [])
    return found


def test_no_module_imports_itself_around_a_circle():
    assert cycles(import_graph()) == []


def test_the_circle_finder_finds_a_circle():
    """The check above can fail: a circle of three, and one of two, are found."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert sorted(map(sorted, map(set, cycles(graph)))) == [["a", "b", "c"], ["d", "e"]]


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
