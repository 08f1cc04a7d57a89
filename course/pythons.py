"""The test suite on every Python the README promises, one after another, each in a
fresh clone and a fresh virtual environment; each Python's result goes to
docs/results.md (`course.results`).

    python3 -m course.pythons                          # 3.10 to 3.13, the whole suite
    python3 -m course.pythons 3.13                     # one of them
    python3 -m course.pythons --newest --notebooks     # what .ci/run adds

Run it after any change to how the scripts start, print or end (an interpreter's
output changes between releases: Python 3.13 colours tracebacks), and commit the rows
it writes to docs/results.md with that change.

Where the Pythons come from: pyenv (`pyenv versions`: the newest patch release of each
promised version), else `python3.X` on the PATH. A promised Python found nowhere gets a
row that says so. Each run is `git clone` of the commit HEAD was at when the command
started (changes not committed are not in it: the command says so first; commits made
while it runs are not either), then exactly the README's test command with
that Python in place of `python3`, or with `--notebooks` the lesson notebooks alone.
Logs: `build/pythons/<version>.log`. Exit status 1 if any Python that ran failed.

`--newest` takes the newest promised Python found, if it is newer than the Python this
command runs on (the one `.ci/run`'s own test command used); otherwise it says why it
runs nothing, and exits 0.
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from course import results

REPO = Path(__file__).resolve().parent.parent
# The README's promise, "Python 3.10 or newer": the releases that exist and that
# PyTorch publishes wheels for. A new one is added here when it has run.
PROMISED = ("3.10", "3.11", "3.12", "3.13")
LESSONS = (
    "00_intro",
    "01_theory",
    "02_multigpu",
    "03_fault_tolerance",
    "04_multinode",
    "05_mingpt",
)
SUMMARY = re.compile(r"^=+ (.*\b(?:passed|failed|error|errors|skipped)\b.*) in ([\d.]+)s")


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def find_python(minor: str) -> tuple[str, Path] | None:
    """(full version, interpreter) for `minor` ("3.13"), or None where there is none."""
    if shutil.which("pyenv"):
        listed = subprocess.run(["pyenv", "versions", "--bare"], capture_output=True, text=True)
        found = [v.strip() for v in listed.stdout.split() if re.fullmatch(r"\d+\.\d+\.\d+", v)]
        found = sorted((v for v in found if v.startswith(minor + ".")), key=version_key)
        if found:
            prefix = subprocess.run(
                ["pyenv", "prefix", found[-1]], capture_output=True, text=True
            ).stdout.strip()
            interpreter = Path(prefix, "bin", "python3")
            if interpreter.exists():
                return found[-1], interpreter
    on_path = shutil.which(f"python{minor}")
    if on_path:
        printed = subprocess.run(
            [on_path, "-c", "import platform; print(platform.python_version())"],
            capture_output=True,
            text=True,
        )
        return printed.stdout.strip(), Path(on_path)
    return None


def test_command(interpreter: Path, notebooks: bool) -> str:
    """The README's test command, with `interpreter` for `python3`."""
    command = (
        f"{interpreter} -m venv .venv && .venv/bin/pip install -r requirements.txt"
        " && .venv/bin/python -m pytest"
    )
    return command + (" " + " ".join(LESSONS) if notebooks else "")


def kill_marked(marker: dict[str, str]) -> None:
    """SIGKILL every process whose environment holds `marker`, one name=value (Linux's
    /proc)."""
    ((name, value),) = marker.items()
    wanted = f"{name}={value}".encode()
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if wanted in environ.read_bytes().split(b"\0"):
                os.kill(int(environ.parent.name), signal.SIGKILL)
        except (OSError, ValueError):
            pass  # gone meanwhile, or not ours to read


def run_one(version: str, interpreter: Path, notebooks: bool, logs: Path, commit: str) -> dict:
    """Clone `commit`, install and test with one Python; the row's facts. The commit,
    not HEAD: commits made while the Pythons run one after another must not give each
    Python another commit under one row of commits."""
    log = logs / f"{version}.log"
    with tempfile.TemporaryDirectory(prefix=f"course-python{version}-") as folder:
        clone = Path(folder, "clone")
        subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
        subprocess.run(["git", "checkout", "--quiet", "--detach", commit], cwd=clone, check=True)
        command = test_command(interpreter, notebooks)
        print(f"Python {version}: {command}  (log: {log})", flush=True)
        started = time.monotonic()
        # Every process of the run carries this marker: an interrupted run leaves none
        # behind (torchrun's workers live in sessions of their own).
        marker = {"COURSE_PYTHONS_RUN": f"{os.getpid()}-{version}"}
        with open(log, "w") as out:
            out.write(f"$ {command}\n")
            out.flush()
            try:
                status = subprocess.run(
                    ["bash", "-c", command],
                    cwd=clone,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, **marker},
                ).returncode
            finally:
                kill_marked(marker)
        seconds = time.monotonic() - started
        python = clone / ".venv/bin/python"  # absent where the venv could not be made
        torch = (
            python.exists()
            and subprocess.run(
                [str(python), "-c", "import torch; print(torch.__version__)"],
                capture_output=True,
                text=True,
            ).stdout.strip()
        )
    summary = [m for line in log.read_text().splitlines() if (m := SUMMARY.match(line))]
    result = summary[-1][1] if summary else "no pytest summary: see the log"
    tests = f"{float(summary[-1][2]):.0f} s of tests" if summary else "-"
    return {
        "version": version,
        "torch": torch or "not installed",
        "ok": status == 0,
        "result": ("all passed: " if status == 0 else "FAILED: ") + result,
        "time": f"{tests}, {seconds:.0f} s with the install",
    }


def chosen(args) -> list[str]:
    if args.newest:
        found = [minor for minor in PROMISED if find_python(minor)]
        own = f"{sys.version_info.major}.{sys.version_info.minor}"
        if not found:
            print(
                "--newest: none of the promised Pythons found (pyenv or python3.X): nothing to run"
            )
            return []
        if version_key(found[-1]) <= version_key(own):
            print(
                f"--newest: {found[-1]} is the newest promised Python here, and this"
                " command's own: nothing more to run"
            )
            return []
        return [found[-1]]
    return args.versions or list(PROMISED)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "versions", nargs="*", metavar="3.X", help=f"default: all of {', '.join(PROMISED)}"
    )
    parser.add_argument(
        "--newest", action="store_true", help="only the newest one found, if newer than this one"
    )
    parser.add_argument("--notebooks", action="store_true", help="the lesson notebooks only")
    args = parser.parse_args()
    # A SIGTERM (a CI time limit) ends the run through its `finally`: nothing left running.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if unknown := [v for v in args.versions if v not in PROMISED]:
        parser.error(f"{', '.join(unknown)}: not a promised Python (these are: {PROMISED})")

    commit, dirty = results.head()
    if dirty:
        print(f"Changes not committed are not tested: each run clones HEAD ({commit[:7]}).")
    logs = REPO / "build" / "pythons"
    logs.mkdir(parents=True, exist_ok=True)
    rows = []
    for minor in chosen(args):
        found = find_python(minor)
        if not found:
            print(
                f"Python {minor}: not found (pyenv install {minor}, or python{minor} on the PATH)"
            )
            rows.append(
                {"version": minor, "torch": "-", "ok": None, "result": "not found", "time": "-"}
            )
            continue
        rows.append(run_one(*found, args.notebooks, logs, commit))
    if not rows:
        return 0
    what = "the notebooks" if args.notebooks else "the suite"
    for row in rows:
        if row["ok"] is not None:  # a Python not found has no result to keep
            results.record(
                "pythons",
                [row["version"], row["torch"], what, commit[:7], results.today(),
                 row["result"], row["time"], str(os.cpu_count())],
            )  # fmt: skip
    return 1 if any(row["ok"] is False for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
