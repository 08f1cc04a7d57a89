"""A slide deck (`course.slides`) in headless chromium: it steps through pages, fragments
and notes with the keyboard, and its speaker window shows each page's notes and steps with
the deck, whichever window is stepped."""

import re

import nbformat

from course import browser_check
from course.browser_check import Browser
from course.slides import to_slides


def in_chromium(deck: str, expression: str, folder) -> tuple[list[str], object]:
    """Serve `deck` from `folder`, open it in chromium, and evaluate `expression` there."""
    (folder / "deck.html").write_text(deck, encoding="utf-8")
    server, base = browser_check.serve(folder)
    try:
        with Browser() as browser:
            return browser.open(base + "deck.html", expression=expression)
    finally:
        server.shutdown()
        server.server_close()


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


def markdown_notebook(*texts: str):
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(t) for t in texts])


def test_a_deck_steps_through_pages_fragments_and_notes(chromium, tmp_path):
    nb = markdown_notebook("# Title\n\nopening words", "## Second", "appears later", "say this")
    nb.cells[2].metadata["slideshow"] = {"slide_type": "fragment"}
    nb.cells[3].metadata["slideshow"] = {"slide_type": "notes"}
    problems, (pages, seen) = in_chromium(to_slides(nb), STEP_THROUGH, tmp_path)

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


# Opens the speaker window from a deck (the key `s`), then steps in each window in turn
# and reports, after each step, the page each shows and what the speaker panel says.
# Each window tells the other by a message: wait until the other has followed.
SPEAKER = """(async () => {
  const press = (win, key) => win.document.dispatchEvent(new KeyboardEvent("keydown", {key}));
  const page = win => win.document.querySelector("section.current h1, section.current h2")
    .textContent.replace("¶", "");
  const until = async test => {
    for (const waited = Date.now(); !test(); ) {
      if (Date.now() - waited > 10000) throw new Error("the other window did not follow");
      await new Promise(resolve => setTimeout(resolve, 50));
    }
  };
  const opened = new Promise(resolve => {
    const open = window.open;
    window.open = (...args) => { const w = open(...args); resolve(w); return w; };
  });
  press(window, "ArrowRight");
  press(window, "s");
  const speaker = await opened;
  await until(() => speaker.document.querySelector(".deck-speaker"));
  const panel = () => ["deck-notes", "deck-next", "deck-clock"].map(
    part => speaker.document.querySelector("." + part).textContent);
  const seen = [[page(window), page(speaker), speaker.location.hash, ...panel()]];
  press(speaker, "ArrowLeft");
  await until(() => page(window) === "Title");
  seen.push([page(window), page(speaker), speaker.location.hash, ...panel()]);
  // The deck's answer to the speaker's hello, arriving late (after the speaker's own step):
  // the speaker must stay where it stepped. Our listener runs after the deck's own.
  const handled = new Promise(done => speaker.addEventListener("message", done, {once: true}));
  speaker.postMessage({deckPage: 1, deckShown: 0, deckWelcome: true}, "*");
  await handled;
  seen.push([page(window), page(speaker), speaker.location.hash, ...panel()]);
  press(window, "End");
  await until(() => page(speaker) === "Second");
  seen.push([page(window), page(speaker), speaker.location.hash, ...panel()]);
  speaker.close();
  return seen;
})()"""


def test_the_speaker_window_shows_the_notes_and_steps_with_the_deck(chromium, tmp_path):
    nb = markdown_notebook(
        "# Title\n\nopening words",
        "> **Speaker notes.** Welcome them.",
        "## Second",
        "> **Speaker notes.** Point at the diff.",
    )
    problems, seen = in_chromium(to_slides(nb), SPEAKER, tmp_path)

    assert problems == []
    # The clock: minutes and seconds since the window opened.
    assert all(re.fullmatch(r"\d+:\d\d", clock) for *_, clock in seen), seen
    diff = "Speaker notes. Point at the diff."
    assert [[*row[:3], row[3].strip(), row[4]] for row in seen] == [
        ["Second", "Second", "#speaker/2", diff, "The last page."],  # opens where the deck is
        ["Title", "Title", "#speaker/1", "Speaker notes. Welcome them.", "Next: Second"],
        ["Title", "Title", "#speaker/1", "Speaker notes. Welcome them.", "Next: Second"],
        ["Second", "Second", "#speaker/2", diff, "The last page."],
    ]
