"""Where the course is and which lessons it has: what `build`, `site` and `slides`
share (each imports this, none imports another for it)."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


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
