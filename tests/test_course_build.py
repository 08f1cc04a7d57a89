"""The build: how the site shows the notebooks (a page per notebook with its run, deck and
scripts; a page per script). The build's kernels: test_course_kernels.py. Sphinx's build
of the whole site, its animations and decks, and the site in a browser: test_course_site.py."""

import os
import re
import sys
from pathlib import Path

import nbformat
from conftest import REPO, code_notebook

from course import build, site, slides
from course.build import lesson_notebooks


def test_a_lesson_is_chosen_by_its_folder_with_all_its_parts():
    # The course order of all the notebooks: the README's lessons table (test_repo_workshop).
    lesson = "03_fault_tolerance"
    chosen = [notebook.stem for notebook in lesson_notebooks([lesson])]
    assert chosen == [lesson, f"{lesson}_elastic", f"{lesson}_preemption"]


def test_a_page_says_how_its_notebook_ran():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Title")])
    run = dict(ok=False, seconds=61.4, date="2026-11-25", torch="2.14.1", python="3.11.7")
    nb.metadata["course_build"] = run
    assert site.run_line(nb) == (
        "**Failed** when executed on 2026-11-25 in 61 s, with PyTorch 2.14.1 and Python 3.11.7"
        " by `python -m course.build`."
    )


def test_a_script_page_shows_the_whole_file_highlighted():
    script = Path("common/ring.py")
    page = site.script_page(script, [Path("01_theory/01_theory.ipynb")])
    assert page.startswith(
        "# common/ring.py\n\nRun or shown by [01_theory](../01_theory/01_theory.ipynb)."
    )
    assert "```{code-block} python\n:linenos:\n" in page
    assert (REPO / script).read_text().rstrip() in page
    # A file with a fence of its own inside keeps it: the page's fence is longer.
    assert site.fenced("a\n```\nb", "text").startswith("````{code-block} text")


def test_a_warning_from_sphinx_fails_the_site(tmp_path, monkeypatch):
    # A source folder whose only page links to a page that does not exist.
    def one_page(executed, source):
        source.mkdir(parents=True)
        (source / "index.md").write_text("# Home\n\n[a lesson](missing.md)\n", encoding="utf-8")

    monkeypatch.setattr(site, "stage", one_page)
    assert site.build_site(tmp_path) != 0
    assert (tmp_path / "html" / "index.html").is_file()  # built all the same


def test_a_failed_notebook_fails_the_build(tmp_path, monkeypatch, capsys):
    lesson = tmp_path / "99_broken"
    lesson.mkdir()
    code_notebook(lesson / "99_broken.ipynb", "1 / 0")
    monkeypatch.setattr(build, "REPO", tmp_path)  # a lesson of a repository made here
    monkeypatch.setattr(build, "lesson_notebooks", lambda names: [lesson / "99_broken.ipynb"])
    monkeypatch.setattr(site, "build_site", lambda out: 0)  # the site: tests above
    monkeypatch.setattr(slides, "write_decks", lambda notebooks, out: [])
    monkeypatch.setattr(sys, "argv", ["course.build", "--out", str(tmp_path / "build")])

    assert build.main() == 1
    assert "1 notebook(s) failed: 99_broken" in capsys.readouterr().err
    executed = nbformat.read(tmp_path / "build/executed/99_broken/99_broken.ipynb", as_version=4)
    assert executed.metadata["course_build"]["ok"] is False  # its page will say so


def test_staging_removes_what_is_gone_and_rewrites_only_what_changed(tmp_path):
    source = tmp_path / "source"
    stale = source / "02_multigpu" / "renamed_since.py.md"  # a script no longer there
    stale.parent.mkdir(parents=True)
    stale.write_text("# renamed_since.py\n")
    site.stage(tmp_path / "executed", source)
    assert not stale.exists()  # Sphinx would build it outside every table of contents
    assert (source / "02_multigpu" / "multigpu.py.md").is_file()

    home, workshop = source / "index.md", source / "WORKSHOP.md"
    os.utime(home, ns=(1, 1))  # as if written long ago
    workshop.write_text("edited since", encoding="utf-8")
    site.stage(tmp_path / "executed", source)

    assert home.stat().st_mtime_ns == 1  # unchanged: not written, so Sphinx skips it
    assert workshop.read_text(encoding="utf-8") == (REPO / "WORKSHOP.md").read_text()


def test_the_published_site_is_built_by_the_documented_command():
    """The Pages workflow runs the command docs/install.md gives for the rendered course."""
    install = (REPO / "docs" / "install.md").read_text(encoding="utf-8")
    documented = install.split("## The whole course, executed and rendered")[1]
    (command,) = re.findall(r"```bash\n(.*?)\n```", documented, re.S)[:1]
    workflow = (REPO / ".github" / "workflows" / "pages.yml").read_text(encoding="utf-8")
    assert f"- run: {command}\n" in workflow
