"""noxfile.py, the suite on every promised Python: its sessions run the README's own test
command (as .ci/run does), read pytest's verdict, and find pyenv's Pythons."""

import importlib
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
from conftest import REPO


@pytest.fixture
def noxfile(monkeypatch):
    """The noxfile; what its import sets in the environment (PYENV_VERSION) is undone."""
    monkeypatch.delenv("PYENV_VERSION", raising=False)
    monkeypatch.syspath_prepend(str(REPO))
    return importlib.import_module("noxfile")


def test_its_sessions_run_the_readmes_test_command(noxfile):
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"\*\*Install and run all tests\*\*.*?```bash\n(.*?)\n```", readme, re.S)
    # nox makes the `.venv` with the session's Python, with venv as the README does.
    assert noxfile.nox.options.default_venv_backend == "venv"
    steps = [
        "python3 -m venv .venv",
        ".venv/bin/" + " ".join(noxfile.INSTALL),
        ".venv/bin/" + " ".join(noxfile.TEST),
    ]
    assert " && ".join(steps) == block
    assert block in (REPO / ".ci" / "run").read_text(encoding="utf-8")  # CI: the same command
    # `notebooks` runs pytest on the six lesson folders, each with its notebooks.
    assert len(noxfile.LESSONS) == 6
    assert all(list((REPO / lesson).glob("*.ipynb")) for lesson in noxfile.LESSONS)


def test_every_python_it_counts_as_found_runs():
    """pyenv's shim of a version pyenv has not made active fails: the noxfile makes every
    installed one active (in a process of its own, so that what it sets stays there)."""
    check = (
        "import shutil, subprocess, noxfile\n"
        "for version in noxfile.PROMISED:\n"
        "    if not shutil.which(f'python{version}'): continue\n"
        "    print(version, subprocess.run([f'python{version}', '-c', 'import platform;"
        " print(platform.python_version())'], capture_output=True, text=True).stdout.strip())"
    )
    printed = subprocess.run(
        [sys.executable, "-c", check], cwd=REPO, capture_output=True, text=True
    ).stdout
    assert printed, "no promised Python found, not even nox's own"
    for line in printed.splitlines():
        version, *ran = line.split()  # ran: [] where python3.X did not run
        assert ran and ran[0].startswith(version + "."), printed


def test_the_row_says_what_pytest_reported(noxfile, tmp_path, monkeypatch):
    """The result column comes from pytest's junit XML: a real one, of a run with a pass,
    a failure, an error and a skip."""
    (tmp_path / "test_four.py").write_text(
        "import pytest\n"
        "@pytest.fixture\ndef broken(): raise RuntimeError\n"
        "def test_pass(): pass\n"
        "def test_fail(): assert False\n"
        "def test_error(broken): pass\n"
        "def test_skip(): pytest.skip('no')\n"
    )
    report = tmp_path / "pytest.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={report}"],
        cwd=tmp_path,
        capture_output=True,
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},  # 1 s instead of 10
    )
    session = SimpleNamespace(run=lambda *args, **kwargs: "3.13.0\n2.14.1\n")
    rows = []
    monkeypatch.setattr(noxfile.results, "record", lambda table, row: rows.append(row))
    noxfile.record(session, "the suite", report, False, 70.4)
    python, torch, what, commit, _, result, time, _ = rows[0]
    assert (python, torch, what, commit) == ("3.13.0", "2.14.1", "the suite", noxfile.COMMIT[:7])
    assert result == "FAILED: 2 failed, 1 passed, 1 skipped"
    assert re.fullmatch(r"\d+ s of tests, 70 s with the install", time)
    noxfile.record(session, "the suite", tmp_path / "absent.xml", False, 9)
    assert rows[1][5] == "FAILED: no pytest report (did the install fail?)"


def test_the_results_module_needs_only_the_standard_library():
    # The noxfile imports it on whatever Python runs nox; -S leaves out every package.
    bare = subprocess.run(
        [sys.executable, "-S", "-c", "import course.results"], cwd=REPO, capture_output=True
    )
    assert bare.returncode == 0, bare.stderr
