"""course.results writes docs/results.md: the newest row per configuration replaces the
old one, every other row and table stays, the committed page is in its format, and a
row names the commit it measured, marked when tracked files had changed."""

import subprocess

import pytest

from course import results


def suite_row(python, torch, result):
    return [python, torch, "the suite", "abc1234", "2026-11-28", result, "900 s", "2"]


def test_a_configuration_keeps_only_its_newest_row(tmp_path):
    page = tmp_path / "results.md"
    results.record("pythons", suite_row("3.11.7", "2.14.1", "all passed: 5 passed"), page)
    results.record("pythons", suite_row("3.13.0", "2.14.1", "all passed: 5 passed"), page)
    results.record("stress", ["all 3", "end_process", "abc1234", "d", "0 failed", "9 s", "-"], page)
    results.record("pythons", suite_row("3.11.7", "2.14.1", "FAILED: 1 failed"), page)

    rows = results.read_rows(page.read_text())
    assert rows["pythons"] == [
        suite_row("3.11.7", "2.14.1", "FAILED: 1 failed"),
        suite_row("3.13.0", "2.14.1", "all passed: 5 passed"),
    ]
    assert rows["stress"] == [["all 3", "end_process", "abc1234", "d", "0 failed", "9 s", "-"]]
    assert rows["gpu"] == []
    # Another wheel of the same PyTorch replaces it; another PyTorch gets a row of its own.
    results.record("pythons", suite_row("3.11.7", "2.14.1+cu130", "all passed: 6"), page)
    results.record("pythons", suite_row("3.11.7", "2.15.0", "all passed: 5 passed"), page)
    torches = [row[1] for row in results.read_rows(page.read_text())["pythons"]]
    assert torches == ["2.14.1+cu130", "2.15.0", "2.14.1"]


def test_a_cell_cannot_break_the_table(tmp_path):
    page = tmp_path / "results.md"
    results.record("pythons", suite_row("3.11.7", "2.14.1", "a | b\nc"), page)
    assert results.read_rows(page.read_text())["pythons"][0][5] == "a / b c"
    with pytest.raises(ValueError, match="has 8 cells"):
        results.record("pythons", ["3.11.7"], page)


def test_the_committed_page_is_the_tools_own():
    text = results.PAGE.read_text(encoding="utf-8")
    rows = results.read_rows(text)
    assert all(rows.values()), "a table of docs/results.md has no row"
    assert results.render(rows) == text


def test_a_row_names_the_commit_measured_and_whether_tracked_files_had_changed(tmp_path):
    def git(*args):
        command = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
        return subprocess.run(command, cwd=tmp_path, check=True, capture_output=True, text=True)

    git("init", "-q")
    (tmp_path / "tracked.py").write_text("a = 1\n")
    git("add", "tracked.py")
    git("commit", "-q", "-m", "first")
    first = git("rev-parse", "HEAD").stdout.strip()
    (tmp_path / "untracked.txt").write_text("not part of what is measured")
    assert results.head(tmp_path) == (first, False)
    (tmp_path / "tracked.py").write_text("a = 2\n")
    assert results.head(tmp_path) == (first, True)
    git("commit", "-q", "-am", "second")
    assert results.head(tmp_path) == (git("rev-parse", "HEAD").stdout.strip(), False) != first
