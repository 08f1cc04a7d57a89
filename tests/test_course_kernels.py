"""Notebooks run in this Python, over Unix sockets: the kernels of the tests (nbmake with
the course.kernels plugin) and of the build (course.build) take no TCP port (course/kernels.py)."""

import json
import os
import subprocess
import sys

import nbformat
from conftest import PYTHON, REPO, code_notebook

from course.build import execute

# The kernel says which Python runs it, in which folder, and how Jupyter talks to it.
PROBE = """
import json, os, sys
from ipykernel.connect import get_connection_info
info = get_connection_info(unpack=True)
with open({record!r}, "w") as file:
    json.dump({{"python": sys.executable, "cwd": os.getcwd(), "transport": info["transport"],
               "ip": info["ip"]}}, file)
"""


def probe_notebook(folder, record):
    return code_notebook(folder / "probe.ipynb", PROBE.format(record=str(record)))


def seen_over_unix_sockets_in_this_python(record):
    seen = json.loads(record.read_text())
    assert seen["transport"] == "ipc", seen
    assert seen["python"] == sys.executable, seen
    assert not os.path.exists(os.path.dirname(seen["ip"])), "the socket folder is left behind"
    return seen


def test_the_tests_kernels_use_unix_sockets(tmp_path):
    notebook = probe_notebook(tmp_path, tmp_path / "seen.json")
    # The suite's own configuration (pyproject's addopts load the plugin): what every notebook
    # of the suite gets. `-n 0` spares two xdist workers (the plugin loads the same in one).
    result = subprocess.run(
        [PYTHON, "-m", "pytest", "-c", str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path)]
        + ["-n", "0", notebook.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    seen_over_unix_sockets_in_this_python(tmp_path / "seen.json")


def test_the_builds_kernels_use_unix_sockets_whatever_kernelspec_comes_first(tmp_path, monkeypatch):
    # A user-level "python3" kernelspec that runs some other Python, found first.
    foreign = tmp_path / "jupyter" / "kernels" / "python3"
    foreign.mkdir(parents=True)
    spec = {"argv": ["/nonexistent/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"]}
    (foreign / "kernel.json").write_text(
        json.dumps({**spec, "display_name": "other", "language": "python"})
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    lesson = tmp_path / "lesson"
    lesson.mkdir()
    ok, _ = execute(probe_notebook(lesson, tmp_path / "seen.json"), tmp_path / "out")
    assert ok
    assert seen_over_unix_sockets_in_this_python(tmp_path / "seen.json")["cwd"] == str(lesson)
    executed = nbformat.read(tmp_path / "out" / "probe.ipynb", as_version=4)
    assert executed.metadata["course_build"]["ok"] is True  # what the page will say
    assert executed.metadata["course_build"]["python"] == sys.version.split()[0]
