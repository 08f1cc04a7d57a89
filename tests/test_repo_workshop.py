"""WORKSHOP.md's timing table: the total its prose states is the sum of its rows, and
each notebook's own "Time" line says what its row says."""

import re

import nbformat
from conftest import REPO

from course.lessons import lesson_notebooks


def seconds(text: str) -> int:
    """'8 min 47 s' or '73 s' in seconds."""
    minutes = re.search(r"(\d+) min", text)
    second = re.search(r"(\d+) s\b", text)
    return (int(minutes[1]) * 60 if minutes else 0) + (int(second[1]) if second else 0)


def table_rows() -> list[list[str]]:
    """WORKSHOP.md's timing table: (notebook, runs in, teaching, exercises) per row."""
    text = (REPO / "WORKSHOP.md").read_text(encoding="utf-8")
    table = text[text.index("| notebook | runs in |") :].split("\n\n", 1)[0]
    return [[cell.strip() for cell in line.split("|")[1:-1]] for line in table.splitlines()[2:]]


def test_the_stated_total_is_the_sum_of_the_rows():
    text = (REPO / "WORKSHOP.md").read_text(encoding="utf-8")
    rows = [row[1] for row in table_rows()]
    assert len(rows) >= 10, rows
    stated = re.search(r"\((\d+ min \d+ s) in all", text)
    assert stated, "WORKSHOP.md no longer states the total run time as '(N min N s in all'"
    assert seconds(stated[1]) == sum(seconds(row) for row in rows), (stated[1], rows)


def test_each_notebook_states_the_time_of_its_row():
    """A notebook's "**Time:**" line, in its first cell, and its row in WORKSHOP.md
    (rows in course order, one per notebook): the same reading and running times."""
    notebooks = lesson_notebooks([])
    rows = table_rows()
    assert len(rows) == len(notebooks), [row[0] for row in rows]
    for notebook, (_, runs_in, teaching, _) in zip(notebooks, rows, strict=True):
        first = nbformat.read(notebook, as_version=4).cells[0].source
        stated = re.search(
            r"\*\*Time:\*\* about (\d+) minutes to read[^;]*; the cells run in (\d+) s",
            " ".join(first.split()),
        )
        assert stated, (
            f"{notebook.name}: no '**Time:** about N minutes to read; the cells run in N s'"
        )
        assert f"{stated[1]} min" == teaching, (notebook.name, stated[0], teaching)
        assert f"{stated[2]} s" == runs_in, (notebook.name, stated[0], runs_in)


def test_the_readmes_lessons_table_states_each_notebooks_reading_time():
    """The README's lessons table, a row per notebook in course order: its time is the
    notebook's own Time line (one figure, held equal here)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("| lesson | what you learn | time |") :].split("\n\n", 1)[0]
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in table.splitlines()[2:]]
    notebooks = lesson_notebooks([])
    assert len(rows) == len(notebooks), [row[0] for row in rows]
    for notebook, (lesson, _, time) in zip(notebooks, rows, strict=True):
        assert f"({notebook.relative_to(REPO)})" in lesson, (lesson, notebook)
        first = " ".join(nbformat.read(notebook, as_version=4).cells[0].source.split())
        stated = re.search(r"\*\*Time:\*\* about (\d+) minutes to read", first)
        assert stated and f"{stated[1]} min" == time, (notebook.name, time)
