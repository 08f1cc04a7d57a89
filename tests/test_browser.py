"""The rendered course in a real headless browser (Debian's chromium).

What is covered: lesson 00_intro's page, index and slide deck as `course.build` and
`course.slides` write them (from the committed notebook, not executed), plus a
notebook made here whose outputs stand for everything the other lessons show (a
matplotlib figure as PNG, a matplotlib animation as HTML+JS from `to_jshtml`, a
table, printed text), executed and rendered both as a page and as a deck. The
lessons' executed pages are not opened here (building them all takes ten minutes):
`python -m course.browser_check build/` does that on a full build. And a broken page,
to show the check fails when it should.

Chromium comes from `python3 -m course.system_packages` (CI runs it as root first);
without it these tests skip and say why, or fail under COURSE_STRICT=1."""

import subprocess
import textwrap

import nbformat
import pytest
from conftest import PYTHON, REPO, skip_or_fail
from nbclient import NotebookClient

from course import browser_check
from course.build import to_html, write_index
from course.slides import to_slides

# A valid 1x1 GIF.
PIXEL = "data:image/gif;base64,R0lGODlhAQABAIAAAP///wAAACH5BAEAAAAALAAAAAABAAEAAAICRAEAOw=="

REPRESENTATIVE = [
    ("md", "# Outputs of every kind\n\nA figure, an animation and a table."),
    (
        "code",
        textwrap.dedent("""\
        import matplotlib.pyplot as plt
        from matplotlib.animation import FuncAnimation
        from IPython.display import HTML, Markdown, display"""),
    ),
    ("md", "## A figure"),
    (
        "code",
        textwrap.dedent("""\
        fig, ax = plt.subplots(figsize=(4, 3))
        ax.plot([1, 2, 3], [3, 1, 2])
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        plt.show()"""),
    ),
    ("md", "## An animation"),
    (
        "code",
        textwrap.dedent("""\
        fig, ax = plt.subplots(figsize=(3, 2))
        (line,) = ax.plot([], [])
        ax.set_xlim(0, 3)
        ax.set_ylim(0, 3)
        animation = FuncAnimation(fig, lambda i: line.set_data(range(i + 1), range(i + 1)),
                                  frames=3)
        plt.close(fig)
        HTML(animation.to_jshtml())"""),
    ),
    ("md", "## A table"),
    ("code", 'display(Markdown("| ranks | seconds |\\n|---|---|\\n| 1 | 2.0 |\\n| 2 | 1.1 |"))'),
    ("code", 'print("rank 0 done")'),
]


@pytest.fixture(scope="session")
def chromium():
    skip_or_fail(browser_check.why_no_chromium())


def representative_notebook():
    nb = nbformat.v4.new_notebook()
    for kind, text in REPRESENTATIVE:
        new = nbformat.v4.new_markdown_cell if kind == "md" else nbformat.v4.new_code_cell
        nb.cells.append(new(text))
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    return nb


def test_the_rendered_course_loads_cleanly(chromium, tmp_path):
    build = tmp_path / "build"
    # Lesson 00's page, index and deck as the build writes them, from the notebook as
    # committed: executing it is its nbmake test's business (40 s more here), and the
    # outputs of every kind the lessons show are in the notebook made below.
    lesson = REPO / "00_intro" / "00_intro.ipynb"
    (build / "00_intro").mkdir(parents=True)
    lesson_page, _ = to_html(nbformat.read(lesson, as_version=4))
    (build / "00_intro" / "00_intro.html").write_text(lesson_page, encoding="utf-8")
    write_index([(lesson, True, 0.0)], build)
    subprocess.run(
        [PYTHON, "-m", "course.slides", "00_intro", "--out", str(build)],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=120,
    )
    nb = representative_notebook()
    page, _ = to_html(nbformat.from_dict(nb))
    (build / "outputs.html").write_text(page, encoding="utf-8")
    (build / "outputs.slides.html").write_text(to_slides(nb), encoding="utf-8")
    # The outputs are really there, as the kinds they stand for.
    assert page.count("data:image/png;base64,") >= 5  # the figure + 3 animation frames
    assert "<table>" in page and 'class="animation"' in page

    results = browser_check.check(build)

    assert sorted(results) == [
        "00_intro/00_intro.html",
        "00_intro/00_intro.slides.html",
        "index.html",
        "outputs.html",
        "outputs.slides.html",
        "slides.html",
    ]
    assert {page: problems for page, problems in results.items() if problems} == {}


# Steps through a deck with the keyboard and reports, after each key, the page shown,
# whether its fragment is visible, and whether the speaker notes are.
STEP_THROUGH = """(() => {
  const state = () => [
    document.querySelector("section.current h1, section.current h2").textContent.replace("¶", ""),
    document.querySelectorAll(".fragment.visible").length,
    getComputedStyle(document.querySelector("aside.notes")).display,
  ];
  const seen = [state()];
  for (const key of ["ArrowRight", "ArrowRight", "ArrowRight", "n", "ArrowLeft", "Home"]) {
    document.dispatchEvent(new KeyboardEvent("keydown", {key}));
    seen.push(state());
  }
  return [document.body.dataset.deckPages, seen];
})()"""


def test_a_deck_steps_through_pages_fragments_and_notes(chromium, tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Title\n\nopening words"),
        nbformat.v4.new_markdown_cell("## Second"),
        nbformat.v4.new_markdown_cell("appears later"),
        nbformat.v4.new_markdown_cell("say this"),
    ]
    nb.cells[2].metadata["slideshow"] = {"slide_type": "fragment"}
    nb.cells[3].metadata["slideshow"] = {"slide_type": "notes"}
    (tmp_path / "deck.html").write_text(to_slides(nb), encoding="utf-8")
    server, base = browser_check.serve(tmp_path)
    try:
        with browser_check.Browser() as browser:
            problems, (pages, seen) = browser.open(base + "deck.html", expression=STEP_THROUGH)
    finally:
        server.shutdown()
        server.server_close()

    assert problems == []
    assert pages == "2"
    assert seen == [
        ["Title", 0, "none"],
        ["Second", 0, "none"],  # a new page: its fragment still hidden
        ["Second", 1, "none"],  # the fragment appears
        ["Second", 1, "none"],  # the last step: nothing further
        ["Second", 1, "block"],  # n: the speaker notes
        ["Second", 0, "block"],  # back: the fragment hides first
        ["Title", 0, "block"],
    ]


def test_a_broken_page_fails(chromium, tmp_path):
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
        '<a href="gone.html">gone</a>\n',
        encoding="utf-8",
    )

    results = browser_check.check(tmp_path)

    assert results["index.html"] == []
    problems = "\n".join(results["broken.html"])
    assert (
        "missing resource: http://127.0.0.1:" in problems and "/missing.png (HTTP 404)" in problems
    )
    assert "image did not load: data:image/png;base64,bm90IGFuIGltYWdl" in problems
    assert "JavaScript exception: ReferenceError: notDefined is not defined" in problems
    assert "console error: something broke" in problems
    assert "fetches from the network: https://cdn.invalid/style.css" in problems
    assert "broken link: gone.html" in problems


def test_the_command_exits_non_zero_on_a_broken_page(chromium, tmp_path):
    (tmp_path / "index.html").write_text('<!doctype html><img src="missing.png">')
    result = subprocess.run(
        [PYTHON, "-m", "course.browser_check", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAIL  index.html" in result.stdout
    assert "0 of 1 pages loaded cleanly" in result.stdout
