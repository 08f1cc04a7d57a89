"""Execute every lesson notebook and write the executed, rendered course to `build/`.

    .venv/bin/python -m course.build              # every lesson
    .venv/bin/python -m course.build 00_intro     # some lessons

For each lesson it writes `build/<lesson>/<notebook>.ipynb` (with outputs, to open
in Jupyter), `.html` (to read in a browser) and `.slides.html` (the slide deck, see
`course.slides`), plus `build/index.html` linking the lessons in order. No page
loads anything from the network; `python -m course.browser_check build/` proves it
in a headless chromium. A notebook that fails is reported and the command exits non-zero
once the others are built. Every cell has a time limit, as in CI.
"""

import argparse
import copy
import html
import re
import sys
import time
from pathlib import Path

import nbformat
from ipykernel.kernelspec import get_kernel_dict
from jupyter_client import AsyncKernelManager
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError
from nbconvert import HTMLExporter
from traitlets import default

REPO = Path(__file__).resolve().parent.parent
TEMPLATES = Path(__file__).resolve().parent / "templates"
# A cell's time limit, as in CI (pytest's --nbmake-timeout), unless the notebook sets
# its own (metadata.execution.timeout) because a cell shows longer launch limits.
CELL_TIMEOUT_SECONDS = 240
# matplotlib's animations link Font Awesome from a CDN for their buttons' icons.
FONT_AWESOME = re.compile(r'<link[^>]*href="https?://[^"]*font-awesome[^"]*"[^>]*>')


def lesson_notebooks(names: list[str]) -> list[Path]:
    """The lesson notebooks, in course order: `NN_topic/NN_*.ipynb`."""
    notebooks = sorted(REPO.glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb"))
    if names:
        unknown = set(names) - {nb.parent.name for nb in notebooks}
        if unknown:
            lessons = ", ".join(sorted({nb.parent.name for nb in notebooks}))
            sys.exit(f"no lesson named {', '.join(sorted(unknown))}; the lessons are: {lessons}")
        notebooks = [nb for nb in notebooks if nb.parent.name in names]
    return notebooks


def cell_limit(nb) -> int:
    """Seconds a cell of this notebook may run: the notebook's own limit, as nbmake reads it."""
    return nb.metadata.get("execution", {}).get("timeout", CELL_TIMEOUT_SECONDS)


class ThisPython(KernelSpecManager):
    """Kernels run the Python that runs the build. Asked for "python3", Jupyter would
    take the first kernelspec of that name it finds, and a user-level one (another
    Python, another environment) comes first: the notebooks then fail with "No module
    named 'common'"."""

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        return KernelSpec(**get_kernel_dict())  # ipykernel's own spec, for sys.executable


class ThisPythonKernel(AsyncKernelManager):
    """nbclient's kernel manager, with `ThisPython` as its kernelspecs."""

    @default("kernel_spec_manager")
    def _this_python(self) -> KernelSpecManager:
        return ThisPython()


def execute(notebook: Path, out_dir: Path) -> tuple[bool, float]:
    """Run one notebook in its own folder; write it, executed, as .ipynb and .html."""
    nb = nbformat.read(notebook, as_version=4)
    started = time.monotonic()
    ok = True
    try:
        NotebookClient(
            nb,
            timeout=cell_limit(nb),
            kernel_name="python3",
            kernel_manager_class=ThisPythonKernel,
            resources={"metadata": {"path": str(notebook.parent)}},
        ).execute()
    except (CellExecutionError, CellTimeoutError) as error:
        ok = False
        print(f"  FAILED: {str(error).strip().splitlines()[-1]}", flush=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out_dir / notebook.name)
    body, _ = to_html(nb)
    (out_dir / notebook.with_suffix(".html").name).write_text(body, encoding="utf-8")
    from course.slides import to_slides  # it builds on this module

    deck = to_slides(copy.deepcopy(nb))
    (out_dir / f"{notebook.stem}.slides.html").write_text(deck, encoding="utf-8")
    return ok, time.monotonic() - started


def to_html(nb) -> tuple[str, dict]:
    """A self-contained HTML page: outputs, figures and animations are inline, and the
    page loads nothing from the network (templates/offline)."""
    exporter = HTMLExporter(template_name="offline", extra_template_basedirs=[str(TEMPLATES)])
    body, resources = exporter.from_notebook_node(nb)
    return offline(body), resources


def offline(page: str) -> str:
    """`page` without the links that outputs make to a CDN, and their icons drawn
    by our own style sheet instead (templates/animation-icons.css)."""
    if not FONT_AWESOME.search(page):
        return page
    icons = (TEMPLATES / "animation-icons.css").read_text(encoding="utf-8")
    page = FONT_AWESOME.sub("", page)
    return page.replace("</head>", f'<style type="text/css">\n{icons}</style>\n</head>', 1)


def write_index(built: list[tuple[Path, bool, float]], build_dir: Path) -> None:
    items = [
        f'<a href="{nb.parent.name}/{nb.stem}.html">{html.escape(nb.stem)}</a>'
        f" ({seconds:.0f} s{'' if ok else ', FAILED'})"
        f' · <a href="{nb.parent.name}/{nb.stem}.slides.html">slides</a>'
        for nb, ok, seconds in built
    ]
    write_list_page(build_dir / "index.html", "DDP, by running it", items)


def write_list_page(path: Path, title: str, items: list[str]) -> None:
    """A plain page: a heading and a numbered list of `items` (HTML)."""
    rows = "\n".join(f"<li>{item}</li>" for item in items)
    path.write_text(
        f"<!doctype html>\n<html><head><meta charset='utf-8'><title>{title}</title></head>\n"
        f"<body><h1>{title}</h1>\n<ol>\n{rows}\n</ol>\n</body></html>\n",
        encoding="utf-8",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lessons", nargs="*", help="lesson folders to build (default: all)")
    parser.add_argument("--out", type=Path, default=REPO / "build", help="where to write")
    args = parser.parse_args()

    built = []
    for notebook in lesson_notebooks(args.lessons):
        print(f"executing {notebook.relative_to(REPO)} ...", flush=True)
        ok, seconds = execute(notebook, args.out / notebook.parent.name)
        print(f"  {'ok' if ok else 'failed'} in {seconds:.0f} s", flush=True)
        built.append((notebook, ok, seconds))
    write_index(built, args.out)

    failed = [nb.parent.name for nb, ok, _ in built if not ok]
    print(f"\nThe executed course is in {args.out}/:")
    print(f"  in a browser:  open {args.out / 'index.html'}")
    print(f"  in Jupyter:    .venv/bin/jupyter lab {args.out}  (to read, with outputs)")
    print("  to run the lessons: .venv/bin/jupyter lab, then 00_intro/ (the scripts are there)")
    if failed:
        print(f"\n{len(failed)} lesson(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
