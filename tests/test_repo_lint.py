"""The learner reads our code: it must pass the linter the project is configured with
(pyproject.toml, [tool.ruff]), notebooks included."""

import re
import subprocess

import pytest
from conftest import PYTHON, REPO, tracked_texts


def ruff(*args, **options):
    command = [PYTHON, "-m", "ruff", *args, "--no-cache"]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, **options)


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=" ".join)
def test_ruff_finds_nothing_to_fix(command):
    result = ruff(*command, ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_bare_skip_in_a_test_is_a_lint_error():
    """Every skip in the tests goes through conftest's skip_or_fail, which COURSE_STRICT=1
    (CI) turns into a failure: pyproject.toml bans pytest's own skips (TID251)."""
    sample = 'import pytest\n\n\ndef test_x():\n    pytest.skip("no Slurm")\n'
    result = ruff("check", "--stdin-filename", "tests/test_x.py", "-", input=sample)
    assert result.returncode == 1 and "TID251 `pytest.skip` is banned" in result.stdout


def test_no_command_uses_torchruns_log_redirection():
    """torchrun's --redirects and --tee do not work on macOS (torch's redirects.py): no
    tracked file has a torchrun command with one (prose naming them in backquotes aside)."""
    command = re.compile(r"torchrun\b[^`\n]*\s--(redirects|tee)\b")
    users = [
        name
        for name, text in tracked_texts().items()
        if name != "tests/test_repo_lint.py" and command.search(text)
    ]
    assert users == []
