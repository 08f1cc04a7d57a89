"""WORKSHOP.md's timing table: the total its prose states is the sum of its rows."""

import re

from conftest import REPO


def seconds(text: str) -> int:
    """'8 min 47 s' or '73 s' in seconds."""
    minutes = re.search(r"(\d+) min", text)
    second = re.search(r"(\d+) s\b", text)
    return (int(minutes[1]) * 60 if minutes else 0) + (int(second[1]) if second else 0)


def test_the_stated_total_is_the_sum_of_the_rows():
    text = (REPO / "WORKSHOP.md").read_text(encoding="utf-8")
    table = text[text.index("| notebook | runs in |") :].split("\n\n", 1)[0]
    rows = [line.split("|")[2] for line in table.splitlines()[2:]]
    assert len(rows) >= 10, rows
    stated = re.search(r"\((\d+ min \d+ s) in all", text)
    assert stated, "WORKSHOP.md no longer states the total run time as '(N min N s in all'"
    assert seconds(stated[1]) == sum(seconds(row) for row in rows), (stated[1], rows)
