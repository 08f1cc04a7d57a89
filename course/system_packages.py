"""Install the Debian packages that the root-only parts of the course need, as a step
of its own: nothing in the course or its tests installs them as a side effect.

    sudo python3 -m course.system_packages          # from the repository folder
    sudo python3 -m course.system_packages --check  # only say what is missing

- Slurm and munge, for lesson 04's local two-node cluster (and 05's sbatch test);
- chromium, for the check that the rendered course loads nothing from the network;
- iproute2 and util-linux (`ip`, `unshare`), for lesson 04's two hosts in network
  namespaces, and git, with which the tests list the course's files and
  noxfile.py clones it: a slim Debian image lacks them.

Without them those parts say why they are skipped (in the notebook, and in pytest's
skip summary). It uses only Python's standard library, so it runs before the virtual
environment exists, and it exits non-zero, with one line, when it cannot install.
"""

import argparse
import os
import shutil
import sys

from course.apt import apt_install

# Folders where Debian puts daemons, which a non-root PATH may lack.
SYSTEM_FOLDERS = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")
# What each part needs: the Debian packages, and the programs that show they are there.
PARTS = {
    "slurm": (
        ["slurmctld", "slurmd", "slurm-client", "munge"],
        ["munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo"],
    ),
    "chromium": (["chromium"], ["chromium"]),
    "netns": (["iproute2", "util-linux"], ["ip", "unshare"]),
    "git": (["git"], ["git"]),
}
INSTALL_COMMAND = "sudo python3 -m course.system_packages"


def program(name: str) -> str | None:
    """The path of an installed program, or None."""
    path = os.pathsep.join([os.environ.get("PATH", ""), *SYSTEM_FOLDERS])
    return shutil.which(name, path=path)


def missing_programs(part: str) -> list[str]:
    return [name for name in PARTS[part][1] if program(name) is None]


def is_root() -> bool:
    """Whether this process runs as root (always False where there are no user ids)."""
    return hasattr(os, "geteuid") and os.geteuid() == 0


def install(parts: list[str], timeout: float) -> str | None:
    """Install what `parts` lack. None on success, else one line saying what failed."""
    packages = [package for part in parts if missing_programs(part) for package in PARTS[part][0]]
    if not packages:
        return None
    if not sys.platform.startswith("linux") or shutil.which("apt-get") is None:
        return f"no apt-get here: install {' '.join(packages)} with this system's package manager"
    if not is_root():
        return f"installing {' '.join(packages)} needs root: run `{INSTALL_COMMAND}`"
    failure = apt_install(packages, lambda: any(missing_programs(p) for p in parts), timeout)
    if failure:
        return failure
    still = [name for part in parts for name in missing_programs(part)]
    return f"apt-get ran, but {', '.join(still)} are still missing" if still else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="*", help=f"some of: {', '.join(PARTS)} (default: all)")
    parser.add_argument("--check", action="store_true", help="only say what is missing")
    parser.add_argument("--timeout", type=float, default=600, help="seconds for apt-get")
    args = parser.parse_args()
    parts = args.parts or list(PARTS)
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"no part named {', '.join(unknown)}; the parts are: {', '.join(PARTS)}")
    if args.check:
        missing = {part: missing_programs(part) for part in parts}
        for part, programs in missing.items():
            print(f"{part}: {'missing ' + ', '.join(programs) if programs else 'installed'}")
        return 1 if any(missing.values()) else 0
    failure = install(parts, args.timeout)
    if failure:
        print(f"system_packages: {failure}", file=sys.stderr)
        return 1
    print(f"installed: {', '.join(parts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
