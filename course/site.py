"""The course site: the executed notebooks, the README, the reference pages of docs/,
WORKSHOP.md, CONTRIBUTING.md and every script, as one Sphinx site (sphinx-book-theme:
sidebar, next/previous, in-page contents, search).

`course.build` executes the notebooks, then calls `build_site`. It assembles Sphinx's
source folder (`build/source/`) from the repository, in the repository's own layout so
that the README's links (`00_intro/00_intro.ipynb`) lead to the pages:

- `index.md`: the README (the home page), with the site's tables of contents after it;
- each lesson's notebooks, executed when the build has run them (else as committed,
  without outputs), each with a line saying when and how it ran, a link to its slide
  deck and to the scripts it runs or shows (the speaker notes are the decks' alone:
  `course.speaker_notes`);
- a highlighted page per script (`multigpu.py.md`), and a list of them per lesson;
- the reference pages of `docs/`, WORKSHOP.md, CONTRIBUTING.md and LICENSE.

Sphinx then writes `build/html/` (settings in `site_config/conf.py`). A file of the
source folder is rewritten only when its text changes, so that Sphinx reads again
only the pages that did.
"""

import re
from pathlib import Path

import nbformat
from sphinx.cmd.build import build_main

from course.lessons import REPO, lesson_notebooks
from course.slides import FONT_AWESOME

CONFIG = Path(__file__).resolve().parent / "site_config"
# A script's language, for highlighting, by how its name ends.
LANGUAGES = {".py": "python", ".sh": "bash", ".sbatch": "bash", ".yaml": "yaml"}
MENTION = re.compile(r"[\w./-]+\.(?:py|sh|sbatch|yaml)\b")


def scripts() -> list[Path]:
    """Every script of the lessons and of `common/`, in course order."""
    files = [
        path
        for folder in (*sorted(REPO.glob("[0-9][0-9]_*/")), REPO / "common")
        for path in sorted(folder.rglob("*"))
        if path.suffix in LANGUAGES and "__pycache__" not in path.parts
    ]
    return [path.relative_to(REPO) for path in files]


# The reference pages of docs/ in the order a reader wants them; any other page follows.
READING_ORDER = ["install", "scripts", "gpus", "troubleshooting", "glossary", "results"]


def reference_pages() -> list[Path]:
    rank = {stem: i for i, stem in enumerate(READING_ORDER)}
    return sorted(sorted(REPO.glob("docs/*.md")), key=lambda p: rank.get(p.stem, len(rank)))


def mentioned_scripts(nb, lesson: Path, known: list[Path]) -> list[Path]:
    """The scripts a notebook's cells name, as paths from the repository: a path from
    the lesson's folder (`../common/models.py`), else a name found once in the lesson."""
    found = []
    for cell in nb.cells:
        for mention in MENTION.findall(cell.source):
            path = (REPO / lesson / mention).resolve()
            candidates = [path.relative_to(REPO)] if path.is_relative_to(REPO) else []
            if not candidates or candidates[0] not in known:
                name = Path(mention).name
                candidates = [p for p in known if p.parts[0] == lesson.name and p.name == name]
            if len(candidates) == 1 and candidates[0] not in found:
                found.append(candidates[0])
    return found


def write_if_changed(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def fenced(text: str, language: str, options: str = "") -> str:
    """`text` as a MyST code block, its fence longer than any backticks inside."""
    fence = "`" * max(3, max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence}{{code-block}} {language}\n{options}\n{text.rstrip()}\n{fence}\n"


def to_root(page: Path) -> Path:
    """The way from `page` (a path in the source folder) back to the folder's top."""
    return Path("../" * (len(page.parts) - 1))


def script_page(script: Path, used_by: list[Path]) -> str:
    text = (REPO / script).read_text(encoding="utf-8")
    links = ", ".join(f"[{nb.stem}]({to_root(script) / nb})" for nb in used_by)
    lines = [f"# {script.as_posix()}", ""]
    if used_by:
        lines += [f"Run or shown by {links}.", ""]
    return "\n".join(lines) + fenced(text, LANGUAGES[script.suffix], ":linenos:")


def run_line(nb) -> str:
    """When and how a notebook was executed, as the build recorded it."""
    run = nb.metadata.get("course_build")
    if not run:
        return "Not executed by this build: the page shows the notebook without outputs."
    outcome = "Executed" if run["ok"] else "**Failed** when executed"
    return (
        f"{outcome} on {run['date']} in {run['seconds']:.0f} s, with PyTorch {run['torch']}"
        f" and Python {run['python']} by `python -m course.build`."
    )


def lesson_page(nb, notebook: Path, scripts_used: list[Path]) -> str:
    """The notebook as the site shows it (JSON): a line on its run, its deck and
    scripts after the title cell."""
    for cell in nb.cells:  # the site's style sheet draws the animations' icons
        for output in cell.get("outputs", []):
            if "text/html" in output.get("data", {}):
                output.data["text/html"] = FONT_AWESOME.sub("", output.data["text/html"])
    # A script of this lesson by its path in the lesson (exercises/ring.py), others in full.
    names = [
        s.relative_to(notebook.parent) if s.is_relative_to(notebook.parent) else s
        for s in scripts_used
    ]
    links = " · ".join(
        f"[{name}]({to_root(notebook) / s}.md)" for name, s in zip(names, scripts_used, strict=True)
    )
    header = [
        run_line(nb),
        f'<a class="course-deck" href="{notebook.stem}.slides.html">Slide deck</a> '
        "(arrow keys to step, `s` opens the speaker window with the notes).",
    ]
    if links:
        header.append(f"Scripts this page runs or shows: {links}.")
    nb.cells.insert(1, nbformat.v4.new_markdown_cell("\n\n".join(header)))
    return nbformat.writes(nb) + "\n"


def toctree(caption: str, entries: list[str]) -> str:
    return "\n".join(["```{toctree}", f":caption: {caption}", ":hidden:", "", *entries, "```", ""])


def pages(executed: Path) -> dict[Path, str]:
    """Every file of Sphinx's source folder, by its path in it: {path: text}."""
    known = scripts()
    notebooks = [nb.relative_to(REPO) for nb in lesson_notebooks([])]
    files, used_by = {}, {script: [] for script in known}
    for notebook in notebooks:
        built = executed / notebook
        nb = nbformat.read(built if built.exists() else REPO / notebook, as_version=4)
        uses = mentioned_scripts(nb, notebook.parent, known)
        for script in uses:
            used_by[script].append(notebook)
        files[notebook] = lesson_page(nb, notebook, uses)
    for script in known:
        files[Path(f"{script}.md")] = script_page(script, used_by[script])

    folders = sorted({script.parts[0] for script in known}, key=lambda f: (f == "common", f))
    for folder in folders:
        title = "Shared by the lessons: common/" if folder == "common" else f"Scripts of {folder}"
        entries = [str(s.relative_to(folder)) + ".md" for s in known if s.parts[0] == folder]
        listing = toctree("Files", entries).replace(":hidden:\n", ":maxdepth: 1\n")
        files[Path(folder) / "scripts.md"] = f"# {title}\n\n{listing}"

    references = [page.relative_to(REPO) for page in reference_pages()]
    home = (REPO / "README.md").read_text(encoding="utf-8")
    home += "\n" + toctree("Lessons", [str(nb) for nb in notebooks])
    home += toctree("Reference", [str(page) for page in references])
    home += toctree("The code", [f"{folder}/scripts.md" for folder in folders])
    home += toctree(
        "For instructors and contributors", ["WORKSHOP.md", "CONTRIBUTING.md", "LICENSE.md"]
    )
    files[Path("index.md")] = home
    for page in [*references, Path("WORKSHOP.md"), Path("CONTRIBUTING.md")]:
        files[page] = (REPO / page).read_text(encoding="utf-8")
    licence = (REPO / "LICENSE").read_text(encoding="utf-8")
    files[Path("LICENSE.md")] = "# License\n\n" + fenced(licence, "text")
    return files


def stage(executed: Path, source: Path) -> None:
    """Write Sphinx's source folder: a file only when its text changed (Sphinx then
    reads again only those), and no file left from a script or lesson since removed
    (Sphinx would build it, outside every table of contents: a warning)."""
    files = pages(executed)
    for old in [path for path in source.rglob("*") if path.is_file()]:
        if old.relative_to(source) not in files:
            old.unlink()
    for path, text in files.items():
        write_if_changed(source / path, text)


def build_site(build: Path) -> int:
    """Stage `build/source/` from `build/executed/` and the repository, and run Sphinx
    into `build/html/`. Sphinx's exit code: 0 when built without a warning (a warning,
    such as a link to a page that does not exist, fails the build)."""
    stage(build / "executed", build / "source")
    options = ["-b", "html", "-c", str(CONFIG), "-d", str(build / "doctrees"), "-W", "--keep-going"]
    return build_main([*options, "-q", str(build / "source"), str(build / "html")])
