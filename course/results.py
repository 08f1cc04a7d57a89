"""docs/results.md: the newest result of each configuration the course ran in, written by
the commands that measure them: `noxfile.py` (the suite on each Python, with nox),
`course.gpu_mode` (on a GPU machine), `tests/stress_launches.py` (many launches) and
`tests/count_restarts.py` (restarts after a kill).

A command replaces the row of its configuration (the first columns of its table) and
keeps every other row: the page holds the newest result per configuration, and the
older ones live in git history."""

import subprocess
from datetime import date
from pathlib import Path
from typing import NamedTuple

# Its own REPO, not course.lessons's: noxfile.py imports it on whatever Python runs nox,
# which need not have the course's packages (nbformat).
REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "results.md"

TITLE = "# Results"
INTRO = """\
The newest result of each configuration the course ran in. The commands that measure
them write this page: each replaces the row of its configuration and keeps the others
(older results are in git history). Commit the page with the change it measured."""


class Table(NamedTuple):
    title: str
    intro: str
    columns: list[str]
    key_columns: int  # the first columns name the configuration

    def configuration(self, row: list[str]) -> list[str]:
        """The cells that name `row`'s configuration. A version's local label (`+cu130`,
        `+cpu`: which wheel pip chose) is not another configuration."""
        return [cell.split("+")[0] for cell in row[: self.key_columns]]


TABLES = {
    "pythons": Table(
        "The test suite on each Python",
        "`.venv/bin/nox` (noxfile.py) runs the README's test command in a fresh clone and a\n"
        "fresh virtual environment, with each promised Python (`-s notebooks`: the lesson\n"
        "notebooks only).",
        ["Python", "PyTorch", "what ran", "commit", "date", "result", "time", "cores"],
        3,
    ),
    "gpu": Table(
        "The GPU mode",
        "`python -m course.gpu_mode` on a machine with CUDA GPUs ([GPUs](gpus.md)): the GPU\n"
        "tests, every lesson script and every notebook, each on the device it chose.",
        ["GPUs", "PyTorch", "Python", "commit", "date", "result", "time"],
        2,
    ),
    "stress": Table(
        "Many launches",
        "`tests/stress_launches.py` launches every DDP lesson script many times at its smallest\n"
        "settings and counts the launches that failed ([the scripts](scripts.md)).",
        ["scripts", "ending", "commit", "date", "result", "time", "load at start"],
        2,
    ),
    "restarts": Table(
        "Restarts after a kill",
        "`tests/count_restarts.py` kills a worker from outside at a different moment in each of\n"
        "many launches with restarts (torchrun's shared store on, as the official command has\n"
        "it) and counts the launches that hung, failed, or ended with weights other than those\n"
        "of a run that was never killed.",
        ["script", "commit", "date", "result", "time", "load at start"],
        1,
    ),
}


def head(repo: Path = REPO) -> tuple[str, bool]:
    """HEAD's commit, and whether tracked files differ from it."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True).stdout

    changes = git("status", "--porcelain", "--untracked-files=no").strip()
    return git("rev-parse", "HEAD").strip(), bool(changes)


def commit() -> str:
    """HEAD's short hash, with `+changes` when tracked files differ from it."""
    full, changes = head()
    return full[:7] + ("+changes" if changes else "")


def today() -> str:
    return date.today().isoformat()


def read_rows(text: str) -> dict[str, list[list[str]]]:
    """The rows of each table on the page, by the table's name."""
    rows: dict[str, list[list[str]]] = {name: [] for name in TABLES}
    titles = {f"## {table.title}": name for name, table in TABLES.items()}
    current = None
    for line in text.splitlines():
        if line.startswith("## "):
            current = titles.get(line.strip())
        elif current and line.startswith("|") and not line.startswith("|---"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if cells != TABLES[current].columns:
                rows[current].append(cells)
    return rows


def render(rows: dict[str, list[list[str]]]) -> str:
    parts = [TITLE, "", INTRO, ""]
    for name, table in TABLES.items():
        parts += [f"## {table.title}", "", table.intro, ""]
        parts.append("| " + " | ".join(table.columns) + " |")
        parts.append("|" + "---|" * len(table.columns))
        parts += ["| " + " | ".join(row) + " |" for row in sorted(rows[name])]
        parts.append("")
    return "\n".join(parts)


def record(name: str, row: list[str], page: Path = PAGE) -> None:
    """Put `row` in table `name` of the page, in place of the row of the same
    configuration if there is one."""
    table = TABLES[name]
    if len(row) != len(table.columns):
        raise ValueError(f"a row of {name!r} has {len(table.columns)} cells: {table.columns}")
    row = [str(cell).replace("|", "/").replace("\n", " ").strip() for cell in row]
    rows = read_rows(page.read_text(encoding="utf-8")) if page.exists() else read_rows("")
    key = table.configuration(row)
    rows[name] = [old for old in rows[name] if table.configuration(old) != key] + [row]
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(render(rows), encoding="utf-8")
    print(f"{page.relative_to(REPO) if page.is_relative_to(REPO) else page}: {row}")
