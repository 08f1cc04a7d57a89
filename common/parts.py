"""Parts of a notebook that need what a machine may lack (Slurm, network namespaces,
py-spy): skipped, saying why, or failed under COURSE_STRICT=1, as the tests are.

Used by lesson 04's notebooks. A part skipped while pytest runs the notebook is also
written to the file that COURSE_SKIPPED_PARTS names (course/pytest_hooks.py sets it):
pytest's summary then lists it, where nbmake alone would show the notebook as passed.
"""

import os
from pathlib import Path


class PartCannotRun(RuntimeError):
    """Under COURSE_STRICT=1 (CI as root, the system packages installed), a part of a
    notebook that cannot run is a failure."""


def unavailable(part: str, reason: str | None) -> str | None:
    """`reason`, after saying that `part` is skipped for it; None, saying nothing, when
    there is no reason (the part runs). Raises PartCannotRun under COURSE_STRICT=1."""
    if reason is None:
        return None
    if os.environ.get("COURSE_STRICT") == "1":
        raise PartCannotRun(f"COURSE_STRICT=1, and {part} cannot run: {reason}")
    print(f"{part} skipped: {reason}")
    record = os.environ.get("COURSE_SKIPPED_PARTS")
    if record:
        with open(record, "a", encoding="utf-8") as file:
            file.write(f"{Path.cwd().name}: {part}: {reason}\n")
    return reason
