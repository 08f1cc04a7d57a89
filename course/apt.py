"""Install Debian packages with apt-get, as root: the mechanism behind
`python3 -m course.system_packages`, the one command that installs what the root-only
parts of the course need (Slurm, chromium). Standard library only.

A file lock keeps two callers from running apt-get at the same time; whoever comes
second finds the work done.
"""

import fcntl
import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

LOCK = Path(tempfile.gettempdir()) / "ddp-course-apt.lock"


def apt_install(
    packages: list[str], still_missing: Callable[[], bool], timeout: float
) -> str | None:
    """Install `packages` with apt-get unless `still_missing()` says another caller has
    meanwhile done it. Returns None when apt-get succeeded or was not needed, else one
    line saying what failed."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not still_missing():
            return None
        print(f"installing {' '.join(packages)} with apt-get ...", flush=True)
        # The package lists of a fresh machine may be empty or stale: update first.
        for command in (["apt-get", "update", "-q"], install):
            try:
                result = subprocess.run(
                    [*command, "-o", "DPkg::Lock::Timeout=120"],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                )
            except subprocess.TimeoutExpired:
                return f"`{' '.join(command)}` did not finish within {timeout:g} s"
            if result.returncode != 0:
                last = (result.stderr.strip() or result.stdout.strip()).splitlines()
                return f"`{' '.join(command)}` failed: {last[-1] if last else 'no output'}"
    return None
