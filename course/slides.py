"""Every lesson notebook as a slide deck that opens offline.

    .venv/bin/python -m course.slides              # every lesson
    .venv/bin/python -m course.slides 00_intro     # some lessons

Writes `build/<lesson>/<notebook>.slides.html` and `build/slides.html` (a list of the
decks). `python -m course.build` writes each deck too, with the executed notebook;
this command executes nothing, so a deck takes a second or two: it renders from the
executed notebook `build/<lesson>/<notebook>.ipynb` when there is one (plots and
results on the slides), else from the lesson's own notebook, without outputs.
Open a deck in a browser and step with the arrow keys, space or a click; `Home`/`End`
jump. (`n` shows speaker notes, the cells typed `notes`; the rule below never gives
that type, so the lessons' decks have none.)

Which cells make the talk is in each cell's `metadata.slideshow.slide_type`, the
field nbconvert and Jupyter's slideshow tools read (`slide`, `subslide`, `fragment`,
`skip`, `notes`, `-`). The rule that sets it is `slide_types` below. The lesson
notebooks store its result in every cell, and `tests/test_slides.py` checks that the
stored types are the rule's; `to_slides` applies it to cells that have none (a notebook
from elsewhere). So it is decided in one place:

- a markdown cell that opens with `#` or `##` starts a slide, `###` a subslide;
- everything from a `Solutions` heading on is skipped: solutions are for reading;
- a code cell of nothing but imports is skipped: boilerplate;
- every other cell (the story, the code shown, the launch, the results) is shown.

A heading inside a markdown cell starts a slide too: the deck splits the cell there
when it renders, so there is a slide per heading whatever the cell boundaries.

nbconvert's own reveal.js template loads reveal.js, jQuery and require.js from a CDN,
and no package installed here ships reveal.js; so the decks use a small slide viewer
of our own (templates/slides), on the same `<section>` markup nbconvert writes.
"""

import argparse
import html
import re
import sys
from pathlib import Path

import nbformat
from nbconvert import SlidesExporter

from course.build import REPO, TEMPLATES, lesson_notebooks, offline, write_list_page

HEADING = re.compile(r"^(#{1,3}) +(.+?)\s*$")
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
    """Give every heading inside a markdown cell a cell of its own, typed by the rule
    (the part before it keeps the cell's metadata). Changes `nb` in place."""
    cells, in_solutions = [], False
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            cells.append(cell)
            continue
        pieces, current = [], []
        for line in cell.source.splitlines():
            if _heading(line) and current and any(part.strip() for part in current):
                pieces.append("\n".join(current))
                current = []
            current.append(line)
        pieces.append("\n".join(current))
        cell.source = pieces[0]
        if (first := _heading(pieces[0].splitlines()[0] if pieces[0] else "")) and SOLUTIONS.match(
            first[1]
        ):
            in_solutions = True
        cells.append(cell)
        for piece in pieces[1:]:
            level, title = _heading(piece.splitlines()[0])
            in_solutions = in_solutions or bool(SOLUTIONS.match(title))
            kind = "skip" if in_solutions else "subslide" if level == 3 else "slide"
            cells.append(
                nbformat.v4.new_markdown_cell(piece, metadata={"slideshow": {"slide_type": kind}})
            )
    nb.cells = cells


def to_slides(nb) -> str:
    """One deck, as a single HTML page that loads nothing from the network. Cells
    without slide metadata (a notebook not written by our generators) get the rule's."""
    kinds = [("md" if cell.cell_type == "markdown" else "code", cell.source) for cell in nb.cells]
    for cell, slide_type in zip(nb.cells, slide_types(kinds), strict=True):
        cell.metadata.setdefault("slideshow", {"slide_type": slide_type})
    split_at_headings(nb)
    exporter = SlidesExporter(template_name="slides", extra_template_basedirs=[str(TEMPLATES)])
    body, _ = exporter.from_notebook_node(nb)
    return offline(body)


def source_for(notebook: Path, build_dir: Path) -> Path:
    """The executed notebook in `build_dir` if there is one, else the lesson's own."""
    executed = build_dir / notebook.parent.name / notebook.name
    return executed if executed.exists() else notebook


def write_list(decks: list[Path], build_dir: Path) -> None:
    items = [
        f'<a href="{deck.parent.name}/{deck.name}">'
        f"{html.escape(deck.name.removesuffix('.slides.html'))}</a>"
        for deck in decks
    ]
    write_list_page(build_dir / "slides.html", "DDP, by running it: slides", items)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lessons", nargs="*", help="lesson folders (default: all)")
    parser.add_argument("--out", type=Path, default=REPO / "build", help="where to write")
    args = parser.parse_args()

    decks = []
    for notebook in lesson_notebooks(args.lessons):
        source = source_for(notebook, args.out)
        deck = args.out / notebook.parent.name / f"{notebook.stem}.slides.html"
        deck.parent.mkdir(parents=True, exist_ok=True)
        deck.write_text(to_slides(nbformat.read(source, as_version=4)), encoding="utf-8")
        executed = "executed" if source != notebook else "not executed: no outputs"
        print(f"{deck}  (from {source}, {executed})")
        decks.append(deck)
    write_list(decks, args.out)
    print(f"\nOpen {args.out / 'slides.html'} in a browser.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
