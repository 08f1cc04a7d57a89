"""Execute every lesson notebook and build the course site and slide decks in `build/`.

    .venv/bin/python -m course.build              # every lesson
    .venv/bin/python -m course.build 00_intro     # some lessons (the others as last built)

It writes:
- `build/executed/<lesson>/<notebook>.ipynb`: the executed notebooks, to open in Jupyter;
- `build/html/`: the site (`course.site`, built by Sphinx): open `build/html/index.html`;
- `build/html/<lesson>/<notebook>.slides.html`: the slide decks (`course.slides`).
No page loads anything from the network; `python -m course.browser_check` proves it in a
headless chromium. A notebook that fails is reported, the site is built with it, and the
command exits non-zero. Every cell has a time limit, as in CI.
"""

import argparse
import datetime
import platform
import sys
import time
from importlib.metadata import version
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError

from course import site, slides
from course.kernels import CourseKernel
from course.lessons import REPO, lesson_notebooks

# A cell's time limit, as in CI (pytest's --nbmake-timeout), unless the notebook sets
# its own (metadata.execution.timeout) because a cell shows longer launch limits.
CELL_TIMEOUT_SECONDS = 240


def cell_limit(nb) -> int:
    """Seconds a cell of this notebook may run: the notebook's own limit, as nbmake reads it."""
    return nb.metadata.get("execution", {}).get("timeout", CELL_TIMEOUT_SECONDS)


def execute(notebook: Path, out_dir: Path) -> tuple[bool, float]:
    """Run one notebook in its own folder; write it, executed, to `out_dir`, with a
    note of when and how it ran (`course_build` in its metadata, which the site shows)."""
    nb = nbformat.read(notebook, as_version=4)
    started = time.monotonic()
    ok = True
    try:
        NotebookClient(
            nb,
            timeout=cell_limit(nb),
            kernel_name="python3",
            kernel_manager_class=CourseKernel,
            resources={"metadata": {"path": str(notebook.parent)}},
        ).execute()
    except (CellExecutionError, CellTimeoutError) as error:
        ok = False
        print(f"  FAILED: {str(error).strip().splitlines()[-1]}", flush=True)
    seconds = time.monotonic() - started
    nb.metadata["course_build"] = {
        "ok": ok,
        "seconds": round(seconds, 1),
        "date": datetime.date.today().isoformat(),
        "torch": version("torch"),
        "python": platform.python_version(),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out_dir / notebook.name)
    return ok, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lessons", nargs="*", help="lesson folders to execute (default: all)")
    parser.add_argument("--out", type=Path, default=REPO / "build", help="where to write")
    args = parser.parse_args()

    failed = []
    for notebook in lesson_notebooks(args.lessons):
        print(f"executing {notebook.relative_to(REPO)} ...", flush=True)
        ok, seconds = execute(notebook, args.out / "executed" / notebook.parent.name)
        print(f"  {'ok' if ok else 'failed'} in {seconds:.0f} s", flush=True)
        failed += [] if ok else [notebook.stem]

    started = time.monotonic()
    print("building the site with Sphinx ...", flush=True)
    sphinx_failed = site.build_site(args.out)
    decks = slides.write_decks(lesson_notebooks([]), args.out)
    print(f"  site and {len(decks)} decks in {time.monotonic() - started:.0f} s", flush=True)

    print(f"\nThe course is in {args.out}/:")
    print(f"  in a browser:  open {args.out / 'html' / 'index.html'}")
    print(
        f"  in Jupyter:    .venv/bin/jupyter lab {args.out / 'executed'}  (to read, with outputs)"
    )
    print("  to run the lessons: .venv/bin/jupyter lab, then 00_intro/ (the scripts are there)")
    if sphinx_failed:
        print("\nSphinx reported problems (above): the site is incomplete", file=sys.stderr)
    if failed:
        print(f"\n{len(failed)} notebook(s) failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed or sphinx_failed else 0


if __name__ == "__main__":
    sys.exit(main())
