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


def test_a_bare_skip_in_a_test_is_a_lint_error():
    """Every skip in the tests goes through conftest's skip_or_fail, which COURSE_STRICT=1
    (CI) turns into a failure: pyproject.toml bans pytest's own skips (TID251)."""
    sample = 'import pytest\n\n\ndef test_x():\n    pytest.skip("no Slurm")\n'
    result = subprocess.run(
        [PYTHON, "-m", "ruff", "check", "--no-cache", "--stdin-filename", "tests/test_x.py", "-"],
        cwd=REPO,
        input=sample,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1 and "TID251 `pytest.skip` is banned" in result.stdout


def test_no_command_uses_torchruns_log_redirection():
    """torchrun's --redirects and --tee are not supported on macOS (torch's
    elastic/multiprocessing/redirects.py): a course that runs on a Mac must not use them.
    Every tracked file is read (scripts, notebooks, sbatch scripts, the README) for a
    torchrun command that has one; prose that names them in backquotes does not count."""
    command = re.compile(r"torchrun\b[^`\n]*\s--(redirects|tee)\b")
    users = [
        name
        for name, text in tracked_texts().items()
        if name != "tests/test_repo_lint.py" and command.search(text)
    ]
    assert users == []
