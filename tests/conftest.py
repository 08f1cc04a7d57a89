"""Shared fixtures and helpers for the tests."""

import os
import re
import sys
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = Path(__file__).resolve().parent / "scripts"
PYTHON = sys.executable


def pids_in(output: str) -> list[int]:
    """Every number printed after 'pid' in a command's output."""
    return [int(pid) for pid in re.findall(r"pid[ =](\d+)", output)]


def is_gone(pid: int) -> bool:
    """True when the process no longer runs (a zombie waiting to be reaped by init
    counts as gone: it holds no port and uses no CPU)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# CI runs as root and installs the system packages first (`.ci/run`): there, a part of
# the course that cannot run is a failure, not a skip that nobody reads.
STRICT = os.environ.get("COURSE_STRICT") == "1"


def skip_or_fail(reason: str | None) -> None:
    """Skip with `reason` (pytest prints it: `-rs`), or fail with it when COURSE_STRICT=1."""
    if reason is None:
        return
    if STRICT:
        pytest.fail(f"COURSE_STRICT=1, and this part cannot run: {reason}", pytrace=False)
    pytest.skip(reason)
