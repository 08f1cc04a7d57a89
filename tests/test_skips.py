"""Every skip in the tests goes through conftest's `skip_or_fail`, so that CI's
COURSE_STRICT=1 turns it into a failure, except the few listed here, each with the
reason it may skip in CI too. (Notebooks skip parts through common.parts, the same rule.)"""

import re

from conftest import REPO

SKIP = re.compile(r"pytest\.skip\(|pytest\.mark\.skip|\bskipif\(|importorskip\(")

# (file, the line's text): why that skip is not a gap in what CI proves.
ALLOWED = {
    (
        "test_common.py",
        '@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a '
        'CPU-only machine")',
    ): "only a machine without a GPU can show that message; CI has none",
    (
        "test_slurm_gpus.py",
        '@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine where torch '
        'sees no GPU")',
    ): "the same: the stop in one line happens only where torch sees no GPU",
    (
        "test_gpu_mode.py",
        'pytest.skip(f"needs {fewest} GPUs")',
    ): "the GPU mode on a machine with too few GPUs; its table counts it. On the CPU, never",
    (
        "test_gpu_mode_runner.py",
        "\"def test_two_ranks(): pytest.skip('needs 2 GPUs')\\n\"",
    ): "a sample test file the runner's table is checked on, not a skip of ours",
}


def skips_outside_the_rule(files) -> list[tuple[str, str]]:
    """(file name, line) of each skip in `files` that is neither skip_or_fail's own nor allowed."""
    found = []
    for path in files:
        for line in path.read_text(encoding="utf-8").splitlines():
            if SKIP.search(line) and (path.name, line.strip()) not in ALLOWED:
                found.append((path.name, line.strip()))
    return found


def test_every_skip_in_the_tests_goes_through_skip_or_fail():
    files = [path for path in sorted((REPO / "tests").glob("*.py")) if path.name != "conftest.py"]
    files.remove(REPO / "tests" / "test_skips.py")  # this file names them
    assert skips_outside_the_rule(files) == []


def test_every_allowed_skip_is_still_there():
    present = {
        (name, line.strip())
        for name, _ in ALLOWED
        for line in (REPO / "tests" / name).read_text(encoding="utf-8").splitlines()
    }
    assert set(ALLOWED) <= present  # a stale entry would allow the next skip there


def test_a_bare_skip_is_found(tmp_path):
    sample = tmp_path / "test_sample.py"
    sample.write_text('import pytest\n\n\ndef test_x():\n    pytest.skip("no Slurm")\n')
    assert skips_outside_the_rule([sample]) == [("test_sample.py", 'pytest.skip("no Slurm")')]
