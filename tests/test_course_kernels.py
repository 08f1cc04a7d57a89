"""Notebooks run in this Python, over Unix sockets: the kernels of the tests (nbmake with
the course.kernels plugin) and of the build (course.build) take no TCP port (course/kernels.py)."""

import json
import os
import subprocess
import sys

import nbformat
from conftest import PYTHON, REPO

from course.build import execute

# The kernel says which Python runs it and how Jupyter talks to it, in a file.
PROBE = """
import json, sys
from ipykernel.connect import get_connection_info
info = get_connection_info(unpack=True)
with open({record!r}, "w") as file:
    json.dump({{"python": sys.executable, "transport": info["transport"], "ip": info["ip"]}}, file)
"""


def probe_notebook(folder, record):
    notebook = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(PROBE.format(record=str(record)))],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    nbformat.write(notebook, folder / "probe.ipynb")
    return folder / "probe.ipynb"


def assert_unix_sockets_in_this_python(record):
    seen = json.loads(record.read_text())
    assert seen["transport"] == "ipc", seen
    assert seen["python"] == sys.executable, seen
    assert not os.path.exists(os.path.dirname(seen["ip"])), "the socket folder is left behind"


def test_the_tests_kernels_use_unix_sockets(tmp_path):
    notebook = probe_notebook(tmp_path, tmp_path / "seen.json")
    # The suite's own configuration (pyproject's addopts, which load the plugin), not the
    # options a test would pass: what every notebook of the suite gets.
    result = subprocess.run(
        [PYTHON, "-m", "pytest", "-c", str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path)]
        + [notebook.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert_unix_sockets_in_this_python(tmp_path / "seen.json")


def test_the_builds_kernels_use_unix_sockets(tmp_path):
    notebook = probe_notebook(tmp_path, tmp_path / "seen.json")
    ok, _ = execute(notebook, tmp_path / "out")
    assert ok
    assert_unix_sockets_in_this_python(tmp_path / "seen.json")
