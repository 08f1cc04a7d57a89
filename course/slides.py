"""Every lesson notebook as a slide deck with speaker notes, that opens offline.

    .venv/bin/python -m course.slides              # every lesson
    .venv/bin/python -m course.slides 00_intro     # some lessons

Writes `build/html/<lesson>/<notebook>.slides.html`, beside the lesson's page on the
course site, which links it. `python -m course.build` writes every deck after executing
the notebooks; this command executes nothing, so a deck takes a second or two: it
renders from the executed notebook in `build/executed/` when there is one (plots and
results on the slides), else from the lesson's own notebook, without outputs.
Open a deck in a browser and step with the arrow keys, space or a click; `Home`/`End`
jump; `n` shows the speaker notes on the page, `s` opens the speaker window (the page,
its notes, the next page's title and a clock; the two windows step together).

Which cells make the talk is in each cell's `metadata.slideshow.slide_type`, the
field nbconvert and Jupyter's slideshow tools read (`slide`, `subslide`, `fragment`,
`skip`, `notes`, `-`). The rule that sets it is `slide_types` below. The lesson
notebooks store its result in every cell, and `tests/test_course_slides.py` checks that the
stored types are the rule's; `to_slides` applies it to cells that have none (a notebook
from elsewhere). So it is decided in one place:

- a markdown cell that opens with `#` or `##` starts a slide, `###` a subslide;
- everything from a `Solutions` heading on is skipped: solutions are for reading;
- a markdown cell that opens with `> **Speaker notes.**` is the notes of the slide it
  is on (type `notes`); the lessons keep theirs out of the notebook, in a notes file
  beside it (`course.speaker_notes` says why), which `write_decks` adds to each deck;
- a code cell of nothing but imports is skipped: boilerplate;
- every other cell (the story, the code shown, the launch, the results) is shown.

A heading inside a markdown cell starts a slide too: the deck splits the cell there
when it renders, so there is a slide per heading whatever the cell boundaries.

nbconvert's own reveal.js template would need reveal.js, jQuery, require.js, mermaid
and MathJax 2 from a CDN (no package we install ships reveal.js), and its footer script
calls MathJax on every step; vendoring them means third-party JavaScript in the repository
and a template of our own anyway. So the decks keep a small viewer of our own
(templates/slides: deck.js and deck.css) on the same `<section>` markup nbconvert writes,
with the one thing an instructor needed from reveal.js: a speaker window.
"""

import argparse
import re
import sys
from pathlib import Path

import nbformat
from nbconvert import SlidesExporter

from course.lessons import REPO, lesson_notebooks
from course.speaker_notes import HEADING, MARKER, notes_file, read_notes, with_notes

TEMPLATES = Path(__file__).resolve().parent / "templates"
ICONS = Path(__file__).resolve().parent / "site_config" / "static" / "animation-icons.css"
# matplotlib's animations link Font Awesome from a CDN for their buttons' icons.
FONT_AWESOME = re.compile(r'<link[^>]*href="https?://[^"]*font-awesome[^"]*"[^>]*>')
SOLUTIONS = re.compile(r"solutions?\b", re.IGNORECASE)


def _heading(line: str) -> tuple[int, str] | None:
    match = HEADING.match(line)
    return (len(match.group(1)), match.group(2)) if match else None


def _imports_only(text: str) -> bool:
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return bool(lines) and all(
        line.startswith(("import ", "from ")) or line.startswith((" ", ")")) for line in lines
    )


def slide_types(cells: list[tuple[str, str]]) -> list[str]:
    """The slide type of each (kind, text) cell, kind "md" or "code", in order."""
    types, in_solutions = [], False
    for kind, text in cells:
        lines = text.strip("\n").splitlines() or [""]
        first = _heading(lines[0]) if kind == "md" else None
        if kind == "md" and first and SOLUTIONS.match(first[1]):
            in_solutions = True
        if in_solutions:
            types.append("skip")
        elif kind == "md" and text.startswith(MARKER):
            types.append("notes")
        elif first:
            types.append("subslide" if first[0] == 3 else "slide")
        elif kind == "code" and _imports_only(text):
            types.append("skip")
        else:
            types.append("-")
        # A Solutions heading further down the cell skips the cells after it.
        if kind == "md" and any(
            (h := _heading(line)) and SOLUTIONS.match(h[1]) for line in lines[1:]
        ):
            in_solutions = True
    return types


def split_at_headings(nb) -> None:
    """Give every heading inside a markdown cell a cell of its own (the part before it
    keeps the cell and its metadata; the new cells have none). Changes `nb` in place."""
    cells = []
    for cell in nb.cells:
        cells.append(cell)
        if cell.cell_type != "markdown":
            continue
        pieces, current = [], []
        for line in cell.source.splitlines():
            if _heading(line) and any(part.strip() for part in current):
                pieces.append("\n".join(current))
                current = []
            current.append(line)
        pieces.append("\n".join(current))
        cell.source = pieces[0]
        cells += [nbformat.v4.new_markdown_cell(piece) for piece in pieces[1:]]
    nb.cells = cells


def to_slides(nb, notes: dict[str, str] | None = None, notes_name: str = "") -> str:
    """One deck, as a single HTML page that loads nothing from the network, with
    `notes` ({page title: notes}, `course.speaker_notes`) on their pages. Cells
    without slide metadata (those split off a cell, and those of a notebook not
    written by our generators) get the rule's."""
    split_at_headings(nb)
    kinds = [("md" if cell.cell_type == "markdown" else "code", cell.source) for cell in nb.cells]
    for cell, slide_type in zip(nb.cells, slide_types(kinds), strict=True):
        cell.metadata.setdefault("slideshow", {"slide_type": slide_type})
    with_notes(nb, notes or {}, notes_name)
    exporter = SlidesExporter(template_name="slides", extra_template_basedirs=[str(TEMPLATES)])
    body, _ = exporter.from_notebook_node(nb)
    return offline(body)


def offline(page: str) -> str:
    """`page` without the links that outputs make to a CDN, and their icons drawn
    by our own style sheet instead (site_config/static/animation-icons.css)."""
    if not FONT_AWESOME.search(page):
        return page
    icons = ICONS.read_text(encoding="utf-8")
    page = FONT_AWESOME.sub("", page)
    return page.replace("</head>", f'<style type="text/css">\n{icons}</style>\n</head>', 1)


def deck_of(notebook: Path, source: Path | None = None) -> str:
    """The deck of a lesson notebook with its speaker notes, rendered from `source`
    (its executed copy) when given, else from the notebook itself."""
    nb = nbformat.read(source or notebook, as_version=4)
    notes = notes_file(notebook)
    return to_slides(nb, read_notes(notes) if notes.exists() else {}, notes.name)


def write_decks(notebooks: list[Path], build: Path) -> list[Path]:
    """A deck per notebook, `build/html/<lesson>/<notebook>.slides.html`, from the
    executed notebook in `build/executed/` when there is one, else the lesson's own;
    the notes come from the notes file beside the lesson's notebook."""
    decks = []
    for notebook in notebooks:
        executed = build / "executed" / notebook.parent.name / notebook.name
        source = executed if executed.exists() else notebook
        deck = build / "html" / notebook.parent.name / f"{notebook.stem}.slides.html"
        deck.parent.mkdir(parents=True, exist_ok=True)
        deck.write_text(deck_of(notebook, source), encoding="utf-8")
        decks.append(deck)
    return decks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lessons", nargs="*", help="lesson folders (default: all)")
    parser.add_argument("--out", type=Path, default=REPO / "build", help="the build folder")
    args = parser.parse_args()

    notebooks = lesson_notebooks(args.lessons)
    for notebook, deck in zip(notebooks, write_decks(notebooks, args.out), strict=True):
        executed = (args.out / "executed" / notebook.parent.name / notebook.name).exists()
        print(f"{deck}  ({'executed' if executed else 'not executed: no outputs'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
