"""Shared fixtures and helpers for the tests."""

import re
import sys
from pathlib import Path

import psutil

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
