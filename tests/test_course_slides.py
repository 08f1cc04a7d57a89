"""Slides: the rule that picks the cells of the talk, and every lesson's deck built
from it (a slide per heading, skipped cells absent, nothing fetched from the network),
with the speaker notes from the notes file beside the notebook and none in the notebook."""

import html
import re
import subprocess
from html.parser import HTMLParser

import nbformat
import pytest
from conftest import PYTHON, REPO, made_once

from course.lessons import lesson_notebooks
from course.slides import slide_types, to_slides
from course.speaker_notes import NotesError, cell_headings, notes_file, page_titles, read_notes

SLIDE_TYPES = {"slide", "subslide", "fragment", "skip", "notes", "-"}


def write_every_deck(out):
    """`python -m course.slides --out OUT`: every lesson's deck, its output kept."""
    command = [PYTHON, "-m", "course.slides", "--out", str(out)]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    (out / "stdout.txt").write_text(result.stdout)


@pytest.fixture(scope="session")
def decks(tmp_path_factory):
    """The folder the command wrote every deck into, once per test run."""
    return made_once(tmp_path_factory, "decks", write_every_deck)


def test_the_rule():
    cells = [  # (kind, text, the type the rule gives)
        ("md", "# 00 · Title\n\nWhat you will learn", "slide"),
        ("code", "import os\nfrom pathlib import (\n    Path,\n)\n", "skip"),  # boilerplate
        ("md", "Some story", "-"),
        ("code", 'import re\n\nrun("torchrun ...")', "-"),  # imports, then a launch: shown
        ("md", "## A section", "slide"),
        ("md", "> **Speaker notes.** Say this.", "notes"),  # the speaker's, on the slide above
        ("md", "### A topic", "subslide"),
        ("code", "# a comment first\nassert check()", "-"),
        ("md", "## Summary\n\n...\n\n## Exercises\n\n...\n\n## Solutions\n\n**1.** ...", "slide"),
        ("code", "solution()", "skip"),  # after the Solutions heading
        ("md", "**2.** ...", "skip"),
    ]
    assert slide_types([cell[:2] for cell in cells]) == [cell[2] for cell in cells]
    # A Solutions heading that opens its cell skips that cell too, and every heading after.
    after = [("md", "## Solutions"), ("code", "x = 1"), ("md", "## Not a new start")]
    assert slide_types(after) == ["skip", "skip", "skip"]


class Deck(HTMLParser):
    """The pages (subslides) of a deck: for each, its headings, whether anything
    was shown on the page before its first heading, and its speaker notes."""

    def __init__(self, page: str):
        super().__init__()
        self.depth, self.slides, self.pages, self.heading, self.in_notes = 0, 0, [], None, 0
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        if tag == "section":
            self.depth += 1
            self.slides += self.depth == 1
            if self.depth == 2:
                self.pages.append({"headings": [], "before_heading": "", "notes": ""})
        elif tag == "aside" and ("class", "notes") in attrs:
            self.in_notes = 1
        elif self.in_notes and tag == "aside":
            self.in_notes += 1
        elif re.fullmatch(r"h[1-3]", tag) and self.depth == 2:
            self.heading = [tag, ""]

    def handle_endtag(self, tag):
        if tag == "section":
            self.depth -= 1
        elif tag == "aside" and self.in_notes:
            self.in_notes -= 1
        elif self.heading and tag == self.heading[0]:
            self.pages[-1]["headings"].append((tag, self.heading[1].strip(" ¶")))
            self.heading = None

    def handle_data(self, data):
        if self.in_notes:
            self.pages[-1]["notes"] += data
        elif self.heading:
            self.heading[1] += data
        elif self.depth == 2 and not self.pages[-1]["headings"]:
            self.pages[-1]["before_heading"] += data.strip()


@pytest.mark.parametrize("notebook", lesson_notebooks([]), ids=lambda nb: nb.stem)
def test_a_lesson_deck_is_the_rules_with_a_slide_per_heading_and_its_notes_file(notebook, decks):
    nb = nbformat.read(notebook, as_version=4)
    # The rule is decided in one place: the types stored in the notebook are its.
    kinds = [("md" if cell.cell_type == "markdown" else "code", cell.source) for cell in nb.cells]
    stored = [cell.metadata.get("slideshow", {}).get("slide_type") for cell in nb.cells]
    assert set(stored) <= SLIDE_TYPES and stored[0] == "slide", stored
    expected = slide_types(kinds)
    wrong = [
        f"cell {number} ({cell.get('id')}): {have}, the rule gives {want}"
        for number, (cell, have, want) in enumerate(zip(nb.cells, stored, expected, strict=True))
        if have != want
    ]
    assert not wrong, wrong
    # The notes are the instructor's: a learner reading the notebook never meets one.
    in_notebook = [c.get("id") for c in nb.cells if "Speaker notes." in c.source]
    assert in_notebook == [], f"{notebook.name}: move these cells to {notes_file(notebook).name}"
    # The notes file: a section per page the deck shows, in the order of the talk.
    types = [cell.metadata["slideshow"]["slide_type"] for cell in nb.cells]
    pages = []  # the titles of the pages the deck shows, each once, in order
    for line_title, slide_type in zip(page_titles(nb.cells), types, strict=True):
        if slide_type != "skip" and line_title not in pages:
            pages.append(line_title)
    notes = read_notes(notes_file(notebook))
    assert list(notes) == pages
    assert all(text.strip() for text in notes.values())
    deck_file = decks / "html" / notebook.parent.name / f"{notebook.stem}.slides.html"
    page = deck_file.read_text(encoding="utf-8")
    deck = Deck(page)
    shown = [title for cell in nb.cells for level, title in cell_headings(cell) if level <= 2]
    shown = shown[: next((i for i, t in enumerate(shown) if t.startswith("Solution")), None)]
    assert deck.slides == len(shown)
    # Each page opens with its heading: a slide with an h1/h2, a subslide with an h3.
    firsts = [p["headings"][0] for p in deck.pages]
    opening = [words(title) for tag, title in firsts if tag in ("h1", "h2")]
    assert opening == [words(title) for title in shown]
    assert all(p["before_heading"] == "" for p in deck.pages), deck.pages
    # Every page has the speaker's notes from the notes file, as notes, not the slide's text.
    # (Titles compare as words: the page shows `code` without its backticks.)
    notes = {words(title): text for title, text in notes.items()}
    for p in deck.pages:
        title = words(p["headings"][0][1])
        assert title in notes, f"{notes_file(notebook).name} has no notes for the page {title}"
        assert words(p["notes"]) == words("Speaker notes. " + notes[title]), title
    # Skipped cells are absent: the solutions, and code that is nothing but imports.
    headings = [title for p in deck.pages for _, title in p["headings"]]
    assert not [title for title in headings if title.startswith("Solution")]
    text = words(re.sub(r"<[^>]+>", "", page))
    for cell in nb.cells:
        if cell.metadata["slideshow"]["slide_type"] == "skip" and cell.cell_type == "code":
            assert words(cell.source) not in text, cell.source
    external = re.findall(r'<(?:script|link|img|iframe)[^>]+(?:src|href)="(https?://[^"]+)"', page)
    assert external == []


def words(text: str) -> str:
    """Letters and digits only, so that code compares with its highlighted HTML."""
    return re.sub(r"\W", "", html.unescape(text))


def test_the_command_writes_every_deck(decks):
    written = sorted(path.relative_to(decks).as_posix() for path in decks.rglob("*.html"))
    expected = [f"html/{nb.parent.name}/{nb.stem}.slides.html" for nb in lesson_notebooks([])]
    assert written == sorted(expected)
    assert "(not executed: no outputs)" in (decks / "stdout.txt").read_text()  # no executed/


def test_a_notes_file_that_does_not_fit_its_notebook_says_where(tmp_path):
    notes = tmp_path / "lesson.notes.md"
    notes.write_text("# Speaker notes\n\n## A page\n\nOne.\n\n## A page\n\nTwo.\n")
    with pytest.raises(NotesError, match="lesson.notes.md:7: the page 'A page' has notes twice"):
        read_notes(notes)
    notes.write_text("# Speaker notes\n\nStray words.\n")
    with pytest.raises(NotesError, match="lesson.notes.md:3: text before the first"):
        read_notes(notes)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Title")])
    with pytest.raises(NotesError, match=r"pages the notebook does not have: \['Gone'\]"):
        to_slides(nb, {"Title": "Hello.", "Gone": "Lost."}, "lesson.notes.md")


def test_notes_lines_join_into_paragraphs_on_the_page(tmp_path):
    notes = tmp_path / "lesson.notes.md"
    notes.write_text("## Title\n\nSay this\nand that.\n\nThen ask.\n")
    assert read_notes(notes) == {"Title": "Say this and that.\n\nThen ask."}
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Title\n\nText")])
    deck = Deck(to_slides(nb, read_notes(notes)))
    assert deck.pages[0]["notes"].split() == "Speaker notes. Say this and that. Then ask.".split()


def test_a_heading_inside_a_cell_starts_a_slide():
    text = (
        "# Title\n\nText\n## A section\n\nMore\n### A topic\n\nDetail\n## Solutions\n\nThe answer"
    )
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(text)])
    page = to_slides(nb)
    deck = Deck(page)
    assert deck.slides == 2  # Title, A section (A topic is a subslide of it)
    assert [p["headings"] for p in deck.pages] == [
        [("h1", "Title")],
        [("h2", "A section")],
        [("h3", "A topic")],
    ]
    assert "Detail" in page and "The answer" not in page  # the solutions are skipped


def test_a_comment_in_a_code_block_is_no_page_title():
    cell = nbformat.v4.new_markdown_cell("## Run it\n\n```bash\n# on each node\ntorchrun x.py\n```")
    assert page_titles([cell]) == ["Run it"]
