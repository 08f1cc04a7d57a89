"""WORKSHOP.md's timing table: the total its prose states is the sum of its rows; each
notebook's own "Time" line says what its rows in WORKSHOP.md and the README's lessons
table say (a row per notebook, in course order)."""

import re

import nbformat
from conftest import REPO

from course.lessons import lesson_notebooks


def seconds(text: str) -> int:
    """'8 min 47 s' or '73 s' in seconds."""
    minutes = re.search(r"(\d+) min", text)
    second = re.search(r"(\d+) s\b", text)
    return (int(minutes[1]) * 60 if minutes else 0) + (int(second[1]) if second else 0)


def table_rows(page: str, header: str) -> list[list[str]]:
    """The cells of each row of the table of `page` that opens with `header`."""
    text = (REPO / page).read_text(encoding="utf-8")
    table = text[text.index(header) :].split("\n\n", 1)[0]
    return [[cell.strip() for cell in line.split("|")[1:-1]] for line in table.splitlines()[2:]]


WORKSHOP = ("WORKSHOP.md", "| notebook | runs in |")  # notebook, runs in, teaching, exercises


def test_the_stated_total_is_the_sum_of_the_rows():
    text = (REPO / "WORKSHOP.md").read_text(encoding="utf-8")
    rows = [row[1] for row in table_rows(*WORKSHOP)]
    assert len(rows) >= 10, rows
    stated = re.search(r"\((\d+ min \d+ s) in all", text)
    assert stated, "WORKSHOP.md no longer states the total run time as '(N min N s in all'"
    assert seconds(stated[1]) == sum(seconds(row) for row in rows), (stated[1], rows)


def test_each_notebook_states_the_times_of_its_rows():
    notebooks = lesson_notebooks([])
    workshop = table_rows(*WORKSHOP)
    readme = table_rows("README.md", "| lesson | what you learn | time |")
    assert len(workshop) == len(notebooks), [row[0] for row in workshop]
    assert len(readme) == len(notebooks), [row[0] for row in readme]
    for notebook, (_, runs_in, teaching, _), (lesson, _, time) in zip(
        notebooks, workshop, readme, strict=True
    ):
        assert f"({notebook.relative_to(REPO)})" in lesson, (lesson, notebook)
        first = " ".join(nbformat.read(notebook, as_version=4).cells[0].source.split())
        stated = re.search(
            r"\*\*Time:\*\* about (\d+) minutes to read[^;]*; the cells run in (\d+) s", first
        )
        assert stated, (
            f"{notebook.name}: no '**Time:** about N minutes to read; the cells run in N s'"
        )
        assert f"{stated[1]} min" == teaching == time, (notebook.name, stated[0], teaching, time)
        assert f"{stated[2]} s" == runs_in, (notebook.name, stated[0], runs_in)
