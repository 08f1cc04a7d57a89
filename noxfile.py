"""The test suite on every Python the README promises, with nox (https://nox.thea.codes).
Each session clones the commit HEAD was at when nox started (changes not committed are not
tested), makes a fresh virtual environment with its Python, and runs the README's test
command in the clone; its result replaces the row of its configuration in docs/results.md
(`course.results`): commit that page with the change it measured.

    .venv/bin/nox                     # the whole suite on 3.10, 3.11, 3.12 and 3.13
    .venv/bin/nox -s suite-3.13       # on one of them
    .venv/bin/nox -s suite-3.13 -- tests/test_course_results.py   # pytest's arguments, not all
    .venv/bin/nox -s notebooks-3.13   # the lesson notebooks only

Run it after any change to how the scripts start, print or end (an interpreter's output
changes between releases: Python 3.13 colours tracebacks).

The Pythons: `python3.X` on the PATH, or installed by pyenv. A promised Python found nowhere
is skipped, and nox's summary says so; with COURSE_STRICT=1 (CI) it fails instead.
"""

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from xml.etree import ElementTree

import nox
from nox.command import CommandFailed

from course import results

REPO = Path(__file__).resolve().parent
# The README's promise, "Python 3.10 or newer": the releases that exist and that PyTorch
# publishes wheels for. A new one is added here when it has run.
PROMISED = ["3.10", "3.11", "3.12", "3.13"]
LESSONS = sorted(folder.name for folder in REPO.glob("0[0-9]_*") if folder.is_dir())
# The README's test command, `python3 -m venv .venv && .venv/bin/pip install -r
# requirements.txt && .venv/bin/python -m pytest`: nox makes the environment with the
# session's Python (venv, as the README does), then these two run in it.
INSTALL = ["pip", "install", "-r", "requirements.txt"]
TEST = ["python", "-m", "pytest"]

nox.options.sessions = ["suite"]
nox.options.default_venv_backend = "venv"
nox.options.envdir = "build/nox"
# Only the machine's own Pythons: nox would otherwise download one it cannot find.
nox.options.download_python = "never"
if os.environ.get("COURSE_STRICT") == "1":
    nox.options.error_on_missing_interpreters = True

# pyenv's shims (on the PATH) run only the versions pyenv has made active: make every one
# installed active, newest first, so that python3.X is pyenv's newest 3.X, for nox too.
if shutil.which("pyenv"):
    installed = subprocess.run(["pyenv", "versions", "--bare"], capture_output=True, text=True)
    os.environ["PYENV_VERSION"] = ":".join(reversed(installed.stdout.split()))

COMMIT, CHANGED = results.head()  # once: every session tests the same commit


@nox.session(python=PROMISED)
def suite(session):
    """The README's test command; pytest's arguments after `--` in place of all tests."""
    what = "pytest " + " ".join(session.posargs) if session.posargs else "the suite"
    tested(session, what, session.posargs)


@nox.session(python=PROMISED)
def notebooks(session):
    """The README's test command on the lesson notebooks only."""
    tested(session, "the notebooks", LESSONS)


def tested(session, what: str, pytest_args: list[str]) -> None:
    """Clone, install and test; the row in docs/results.md, passed or failed."""
    if CHANGED:
        session.warn(f"Changes not committed are not tested: the clone is {COMMIT[:7]}.")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="course-nox-") as clone:
        session.run("git", "clone", "--quiet", str(REPO), clone, external=True)
        session.run("git", "-C", clone, "checkout", "--quiet", "--detach", COMMIT, external=True)
        session.chdir(clone)
        report = Path(clone, "build", "pytest.xml")
        try:
            session.run(*INSTALL)
            session.run(*TEST, *pytest_args, f"--junitxml={report}")
        except CommandFailed:
            record(session, what, report, False, time.monotonic() - started)
            raise
        else:
            record(session, what, report, True, time.monotonic() - started)
        finally:
            # torch with its CUDA libraries is gigabytes: no environment is kept per Python.
            shutil.rmtree(session.virtualenv.location, ignore_errors=True)


# The row's Python and PyTorch, as the session's environment has them.
VERSIONS = """\
import importlib.util, platform
print(platform.python_version())
print(importlib.util.find_spec("torch") and __import__("torch").__version__ or "not installed")"""


def record(session, what: str, report: Path, ok: bool, seconds: float) -> None:
    output = session.run("python", "-c", VERSIONS, silent=True, stderr=subprocess.DEVNULL)
    python, torch = output.splitlines()
    result, tests = "no pytest report (did the install fail?)", ""
    if report.exists():  # pytest's junit XML: its counts, and its time
        counts = ElementTree.parse(report).getroot().find("testsuite").attrib
        failed = int(counts["failures"]) + int(counts["errors"])
        skipped = int(counts["skipped"])
        numbers = [(failed, "failed"), (int(counts["tests"]) - failed - skipped, "passed"),
                   (skipped, "skipped")]  # fmt: skip
        result = ", ".join(f"{n} {word}" for n, word in numbers if n)
        tests = f"{float(counts['time']):.0f} s of tests, "
    results.record(
        "pythons",
        [python, torch, what, COMMIT[:7], results.today(),
         ("all passed: " if ok else "FAILED: ") + result,
         f"{tests}{seconds:.0f} s with the install", str(os.cpu_count())],
    )  # fmt: skip
