"""The course site, built by `course.build`'s Sphinx step without a warning, from the
lesson notebooks as committed but lesson 00's: one executed here, whose outputs stand for
all the lessons show. Its first pages (every link on them followed) and a search load
cleanly in chromium, and `python -m course.browser_check` fails a broken page and exits 1.
(A deck's steps and speaker window: tests/test_course_slides_in_browser.py.)"""

import re
import subprocess
import time

import nbformat
import pytest
from conftest import PYTHON, REPO, made_once
from nbclient import NotebookClient
from playwright.sync_api import Error

from course import browser_check, site
from course.browser_check import Browser
from course.lessons import lesson_notebooks
from course.slides import to_slides, write_decks

# A valid 1x1 GIF.
PIXEL = "data:image/gif;base64,R0lGODlhAQABAIAAAP///wAAACH5BAEAAAAALAAAAAABAAEAAAICRAEAOw=="

# Lesson 00 as the site shows it: an output of each kind the lessons show (a matplotlib
# figure, HTML+JS from `to_jshtml` and 01's ring stepper, a table, printed text). Its
# cells, separated by `---` lines; a cell that opens with `#` is markdown.
REPRESENTATIVE = """\
# Outputs of every kind

A figure, an animation and a table.
---
import matplotlib.pyplot as plt
from matplotlib.animation import FuncAnimation
from IPython.display import HTML, Markdown, display

from common.figure_text import animation_html
from common.notebook_device import choose

choose(cpu_because="a notebook of outputs")  # as every lesson's first cell
---
## A figure
---
fig, ax = plt.subplots(figsize=(4, 3))
ax.plot([1, 2, 3], [3, 1, 2])
ax.set_xlabel("step")
ax.set_ylabel("loss")
ax.set_title("Loss per step")
plt.show()
---
## An animation
---
fig, ax = plt.subplots(figsize=(3, 2))
(line,) = ax.plot([], [])
ax.set_xlim(0, 3)
ax.set_ylim(0, 3)
animation = FuncAnimation(fig, lambda i: line.set_data(range(i + 1), range(i + 1)), frames=3)
plt.close(fig)
HTML(animation_html(animation, "A line growing"))
---
from common.ring_stepper import stepper_html

HTML(stepper_html(start=3))
---
## A table
---
display(Markdown("| ranks | seconds |\\n|---|---|\\n| 1 | 2.0 |\\n| 2 | 1.1 |"))
---
print("rank 0 done")"""


def representative_notebook():
    cells = [
        (nbformat.v4.new_markdown_cell if text.startswith("#") else nbformat.v4.new_code_cell)(text)
        for text in REPRESENTATIVE.split("\n---\n")
    ]
    nb = nbformat.v4.new_notebook(cells=cells)
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    return nb


def build_site(build):
    """Into `build`: lesson 00 executed (the representative notebook), the site, the
    decks of the two lessons whose pages are opened here, and Sphinx's exit code."""
    nb = representative_notebook()
    run = {"ok": True, "seconds": 1.0, "date": "2026-11-25", "torch": "t", "python": "p"}
    nb.metadata["course_build"] = run
    (build / "executed" / "00_intro").mkdir(parents=True)
    nbformat.write(nb, build / "executed" / "00_intro" / "00_intro.ipynb")
    (build / "sphinx_exit_code").write_text(str(site.build_site(build)))
    write_decks(lesson_notebooks(["01_theory"]), build)  # the decks opened here: 01's, and
    # 00's, whose executed copy is the representative notebook, so without 00's notes
    deck = to_slides(nbformat.read(build / "executed" / "00_intro" / "00_intro.ipynb", 4))
    (build / "html" / "00_intro" / "00_intro.slides.html").write_text(deck, encoding="utf-8")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(the build folder, Sphinx's exit code), built once per test run (made_once)."""
    build = made_once(tmp_path_factory, "site", build_site)
    return build, int((build / "sphinx_exit_code").read_text())


def test_the_site_builds_without_a_warning(built):
    build, sphinx_exit_code = built
    assert sphinx_exit_code == 0
    html = build / "html"
    for script in site.scripts():  # a page per script
        assert (html / f"{script}.html").is_file(), script
    lesson = (html / "00_intro" / "00_intro.html").read_text(encoding="utf-8")
    # The sidebar lists every lesson in course order; next and previous lead on.
    home = (html / "index.html").read_text(encoding="utf-8")
    sidebar = home[home.index('class="bd-sidebar-primary') :]
    order = [
        sidebar.index(f'href="{nb.relative_to(REPO)}'.replace(".ipynb", ".html"))
        for nb in lesson_notebooks([])
    ]
    assert order == sorted(order)
    for page in [*site.reference_pages(), REPO / "WORKSHOP.md", REPO / "CONTRIBUTING.md"]:
        assert f'href="{page.relative_to(REPO).with_suffix(".html")}' in sidebar, page
    assert re.search(r'class="left-prev"\s+href="../index.html"', lesson)
    assert re.search(r'class="right-next"\s+href="../01_theory/01_theory.html"', lesson)
    # The executed outputs, the run, the deck and the scripts.
    assert lesson.count("data:image/png;base64,") + lesson.count('src="../_images/') >= 2
    assert "Executed on 2026-11-25 in 1 s" in lesson
    assert lesson.count('class="ring-stepper"') == 1 and '"application/json"' in lesson
    assert 'href="00_intro.slides.html"' in lesson
    # matplotlib's animations link Font Awesome from a CDN; the site's style sheet draws
    # their icons instead.
    executed = (build / "executed" / "00_intro" / "00_intro.ipynb").read_text(encoding="utf-8")
    assert "font-awesome" in executed and "font-awesome" not in lesson
    assert 'class="anim-buttons"' in lesson
    theory = (html / "01_theory" / "01_theory.html").read_text(encoding="utf-8")
    assert 'href="ring_allreduce.py.html"' in theory and "Not executed by this build" in theory
    assert "Speaker notes." not in theory  # they are the decks'
    # A page links the scripts its cells name: in its folder, in a subfolder, in common/.
    fault = (html / "03_fault_tolerance" / "03_fault_tolerance.html").read_text(encoding="utf-8")
    for link in ["multigpu_torchrun.py", "exercises/atomic_save.py", "../common/snapshot.py"]:
        assert f'href="{link}.html"' in fault, link
    assert 'href="03_fault_tolerance.slides.html"' in fault
    assert (html / "00_intro" / "00_intro.slides.html").is_file()


def test_a_deck_describes_its_figures_and_draws_its_animations_icons_itself(built):
    build, _ = built
    deck = (build / "html" / "00_intro" / "00_intro.slides.html").read_text(encoding="utf-8")
    assert 'class="anim-buttons"' in deck and "font-awesome" not in deck
    assert ".anim-buttons .fa-play::before" in deck  # the icons, drawn without the font
    images = re.findall(r"<img\b[^>]*>", deck)
    assert images, "the representative notebook's figure is missing from its deck"
    described = [re.search(r'alt="([^"]*)"', image) for image in images]
    assert [alt[1] if alt else None for alt in described] == ["Loss per step", "A line growing"]


def test_the_site_loads_cleanly_in_chromium(chromium, built):
    html = built[0] / "html"
    pages = [
        "index.html",
        "00_intro/00_intro.html",
        "00_intro/00_intro.slides.html",
        "00_intro/hello_torchrun.py.html",
        "00_intro/scripts.html",
        "01_theory/01_theory.html",
        "WORKSHOP.html",
        "CONTRIBUTING.html",
        *(f"docs/{page.stem}.html" for page in site.reference_pages()),
    ]

    results = browser_check.check(html, [html / page for page in pages])

    assert sorted(results) == sorted([*pages, "search.html?q=all_reduce"])
    assert {page: problems for page, problems in results.items() if problems} == {}


def test_a_broken_page_fails_and_the_command_exits_non_zero(chromium, tmp_path):
    (tmp_path / "index.html").write_text(
        f'<!doctype html><img src="{PIXEL}"><a href="broken.html">on</a>', encoding="utf-8"
    )
    (tmp_path / "broken.html").write_text(
        "<!doctype html>\n"
        '<img src="missing.png">\n'
        '<img src="data:image/png;base64,bm90IGFuIGltYWdl">\n'
        "<script>notDefined();</script>\n"
        '<script>console.error("something broke")</script>\n'
        '<link rel="stylesheet" href="https://cdn.invalid/style.css">\n'
        '<a href="gone.html">gone</a>\n'
        '<a href="index.html#nowhere">a place index.html does not have</a>\n',
        encoding="utf-8",
    )
    result = subprocess.run(
        [PYTHON, "-m", "course.browser_check", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "ok    index.html\n" in result.stdout and "FAIL  broken.html\n" in result.stdout
    assert "1 of 2 pages loaded cleanly" in result.stdout
    problems = result.stdout  # each printed under its page
    assert "missing resource: http://127.0.0.1:" in problems
    assert "/missing.png (HTTP 404)" in problems
    assert "image did not load: data:image/png;base64,bm90IGFuIGltYWdl" in problems
    assert "JavaScript exception: ReferenceError: notDefined is not defined" in problems
    assert "console error: something broke" in problems
    assert "fetches from the network: https://cdn.invalid/style.css" in problems
    assert "broken link: gone.html" in problems
    assert "broken link: index.html#nowhere (no such place)" in problems


def test_a_browser_that_exits_while_starting_is_named_at_once(tmp_path):
    """Reported as gone, not waited for until its start's time-out (120 s): this stand-in
    reads the first command, then exits without answering."""
    stand_in = tmp_path / "chromium"
    stand_in.write_text("#!/bin/sh\nhead -c 1 <&3 >/dev/null\n")
    stand_in.chmod(0o755)
    started = time.monotonic()
    with pytest.raises(Error, match=r"^BrowserType.launch: Target .* has been closed"):
        Browser(str(stand_in))
    assert time.monotonic() - started < 60
