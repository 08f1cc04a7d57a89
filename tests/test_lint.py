"""The learner reads our code: it must pass the linter the project is configured with
(pyproject.toml, [tool.ruff]), notebooks included."""

import subprocess

from conftest import PYTHON, REPO


def ruff(*args):
    return subprocess.run(
        [PYTHON, "-m", "ruff", *args, "--no-cache", "."], cwd=REPO, capture_output=True, text=True
    )


def test_ruff_check_finds_nothing():
    result = ruff("check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_code_is_formatted():
    result = ruff("format", "--check")
    assert result.returncode == 0, result.stdout + result.stderr
