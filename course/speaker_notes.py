"""The instructor's speaker notes: a Markdown file beside each lesson notebook, read
only by the slide decks (`course.slides`).

`02_multigpu/02_multigpu.ipynb` has its notes in `02_multigpu/02_multigpu.notes.md`:

    # Speaker notes: 02_multigpu.ipynb

    ## From one process to many: the diff

    Put the two files side by side ...

Each `## ` heading is the title of a page of the deck (a notebook heading, `#` to
`###`, exactly as written there), and the paragraphs under it are that page's notes.
The deck shows them on the page (`n`) and in the speaker window (`s`), after the
words "Speaker notes."; Jupyter and the course site never show them.

Why a file and not the notebook: in the notebook, notes were cells that a learner had
to read past, about one after every slide. In each cell's metadata Jupyter would hide
them, but an instructor could not edit them in Jupyter's editor, and every note would
be one long escaped JSON string, whose diff is the whole note for a one-word change. A
Markdown file opens in JupyterLab's editor or any other, wraps its lines, and diffs line
by line; keyed by the page's title, it reads in the order of the talk, and a renamed
heading or a page without notes fails `tests/test_course_slides.py` by name.
"""

import re
from pathlib import Path

import nbformat

# The words the decks show before every note (the notes cells once opened with them).
MARKER = "> **Speaker notes.**"
HEADING = re.compile(r"^(#{1,3}) +(.+?)\s*$")


class NotesError(ValueError):
    """A notes file that does not fit its notebook."""


def notes_file(notebook: Path) -> Path:
    """`02_multigpu/02_multigpu.ipynb` -> `02_multigpu/02_multigpu.notes.md`."""
    return notebook.with_suffix(".notes.md")


def read_notes(path: Path) -> dict[str, str]:
    """{page title: its notes}, in the file's order. Lines of a paragraph join with a
    space; paragraphs keep a blank line between them."""
    notes: dict[str, list[str]] = {}
    title = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("## "):
            title = line[3:].strip()
            if title in notes:
                raise NotesError(f"{path.name}:{number}: the page '{title}' has notes twice")
            notes[title] = []
        elif title is not None:
            notes[title].append(line)
        elif line.strip() and not line.startswith("# "):
            raise NotesError(f"{path.name}:{number}: text before the first '## page title'")
    return {title: _paragraphs(lines) for title, lines in notes.items()}


def _paragraphs(lines: list[str]) -> str:
    text = "\n".join(lines).strip()
    return "\n\n".join(" ".join(p.split("\n")) for p in re.split(r"\n\s*\n", text) if p.strip())


def notes_cell_source(text: str) -> str:
    """The Markdown of a notes cell, as the decks render it: a quote after the marker."""
    return f"{MARKER} " + text.replace("\n\n", "\n>\n> ")


def cell_headings(cell) -> list[tuple[int, str]]:
    """(level, title) of each heading of a markdown cell, outside code blocks."""
    found, fenced = [], False
    for line in cell.source.splitlines() if cell.cell_type == "markdown" else []:
        fenced ^= line.startswith("```")
        if (match := HEADING.match(line)) and not fenced:
            found.append((len(match.group(1)), match.group(2)))
    return found


def page_titles(cells) -> list[str | None]:
    """For each cell, the title of the deck page it is on: the last heading (outside
    code blocks) in this or an earlier markdown cell. None before the first one."""
    titles, title = [], None
    for cell in cells:
        if found := cell_headings(cell):
            title = found[-1][1]
        titles.append(title)
    return titles


def with_notes(nb, notes: dict[str, str], name: str = "the notes file"):
    """`nb` with a notes cell (slide type `notes`) at the end of each page that `notes`
    names. The notebook's cells must already be split at their headings (a heading
    opens its cell; `course.slides.split_at_headings`). Raises NotesError for a title
    that no page of `nb` has."""
    titles = page_titles(nb.cells)
    unknown = [title for title in notes if title not in titles]
    if unknown:
        raise NotesError(f"{name} has notes for pages the notebook does not have: {unknown}")
    cells = []
    for index, (cell, title) in enumerate(zip(nb.cells, titles, strict=True)):
        cells.append(cell)
        page_ends = index + 1 == len(nb.cells) or titles[index + 1] != title
        if page_ends and title in notes:
            note = nbformat.v4.new_markdown_cell(
                notes_cell_source(notes[title]), metadata={"slideshow": {"slide_type": "notes"}}
            )
            note.id = f"notes-{sum(c.id.startswith('notes-') for c in cells) + 1:02d}"
            cells.append(note)
    nb.cells = cells
    return nb
