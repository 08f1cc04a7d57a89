"""Ports for the servers a lesson starts itself (the rendezvous of `mp.spawn`, a static
or c10d rendezvous endpoint, Slurm's daemons), chosen so that no two users can collide.

Introduced in 02_multigpu (`multigpu.py` picks the port its processes meet at); used by
`common.launch` (the `{port}` placeholder) and the tests.

The usual trick, bind port 0 and close the socket, only makes a collision rare: the
port comes from the kernel's *ephemeral* range, the same range every outgoing
connection takes its local port from, and the job binds it seconds later. With two
test workers or two notebooks running DDP side by side, one's gloo connections can
take the port the other is about to listen on. So `free_port` picks from a range
below the ephemeral one, which outgoing connections never use, and reserves each port
for the lifetime of the process that picked it with a lock file, so that no other
process of this course (another test worker, another notebook) picks it too. What it
cannot prevent: a program outside the course starting to listen on it later.
"""

import fcntl
import os
import random
import socket
import tempfile
from pathlib import Path

# Below Linux's default ephemeral range (32768-60999) and macOS's (49152-65535).
COURSE_RANGE = range(20000, 32768)
# Shared by every user of the machine (a classroom server), like /tmp itself: anyone
# may add a lock file, and flock needs only read access to lock another user's.
SHARED_LOCK_FOLDER = Path(tempfile.gettempdir()) / "ddp-course-ports"

_held: dict[int, int] = {}  # port -> open file descriptor holding its lock


def ephemeral_range() -> range:
    """The kernel's range for the local ports of outgoing connections (Linux reports it;
    elsewhere the IANA range that macOS uses)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return range(int(low), int(high) + 1)
    except (OSError, ValueError):
        return range(49152, 65536)


def candidate_ports() -> list[int]:
    """The course's ports that the kernel never hands out to a connection."""
    ephemeral = ephemeral_range()
    candidates = [port for port in COURSE_RANGE if port not in ephemeral]
    if not candidates:
        raise RuntimeError(
            f"the kernel's ephemeral port range {ephemeral.start}-{ephemeral.stop - 1} covers "
            f"all of {COURSE_RANGE.start}-{COURSE_RANGE.stop - 1}: narrow it "
            "(sysctl net.ipv4.ip_local_port_range) so that the course can choose safe ports"
        )
    return candidates


def lock_folder() -> Path:
    """The shared lock folder, made writable for every user (mode 1777, as /tmp) by
    whoever creates it. If another user made it without that (an older version of this
    file), this user cannot add locks there, and takes a folder of its own."""
    try:
        SHARED_LOCK_FOLDER.mkdir()
        os.chmod(SHARED_LOCK_FOLDER, 0o1777)  # mkdir's mode would be cut by the umask
    except FileExistsError:
        pass
    if os.access(SHARED_LOCK_FOLDER, os.W_OK | os.X_OK):
        return SHARED_LOCK_FOLDER
    own = SHARED_LOCK_FOLDER.with_name(f"{SHARED_LOCK_FOLDER.name}-{os.getuid()}")
    own.mkdir(exist_ok=True)
    return own


def _reserve(port: int) -> bool:
    """Take the port's lock (released when this process ends) if no one holds it."""
    # Read-only: a lock file that another user created stays usable (flock locks a file
    # whatever mode it was opened in).
    descriptor = os.open(lock_folder() / f"{port}.lock", os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        return False
    _held[port] = descriptor
    return True


def _nothing_listens(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port that nothing listens on, outside the ephemeral range, and reserved for
    this process: no other caller of `free_port` gets it while this process lives."""
    candidates = candidate_ports()
    start = random.randrange(len(candidates))  # side-by-side callers start far apart
    for port in candidates[start:] + candidates[:start]:
        if port in _held or not _reserve(port):
            continue
        if _nothing_listens(port):
            return port
    raise RuntimeError(
        f"no free port in {COURSE_RANGE.start}-{COURSE_RANGE.stop - 1}: every one is in use"
    )
