"""The learner reads our code: it must pass the linter the project is configured with
(pyproject.toml, [tool.ruff]), notebooks included."""

import re
import subprocess

from conftest import PYTHON, REPO, tracked_texts


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


def test_no_command_uses_torchruns_log_redirection():
    """torchrun's --redirects and --tee are not supported on macOS (torch's
    elastic/multiprocessing/redirects.py): a course that runs on a Mac must not use them.
    Every tracked file is read (scripts, notebooks, sbatch scripts, the README) for a
    torchrun command that has one; prose that names them in backquotes does not count."""
    command = re.compile(r"torchrun\b[^`\n]*\s--(redirects|tee)\b")
    users = [
        name
        for name, text in tracked_texts().items()
        if name != "tests/test_lint.py" and command.search(text)
    ]
    assert users == []
