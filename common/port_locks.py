"""A port that `common.ports.free_port` picked, kept from every other process of the
course while the process that picked it lives: a lock file per port.

Why: the tests run in parallel workers, nbmake runs notebooks side by side, and a
classroom server runs many learners' notebooks at once. Between the moment one process
finds a port free and the moment its job listens on it, another could find the same port
free. The lock closes that gap for the course's own processes; what it cannot prevent is
a program outside the course starting to listen on the port meanwhile.
"""

import fcntl
import os
import tempfile
from pathlib import Path

# Shared by every user of the machine (a classroom server), like /tmp itself: anyone
# may add a lock file, and flock needs only read access to lock another user's.
SHARED_LOCK_FOLDER = Path(tempfile.gettempdir()) / "ddp-course-ports"

_held: dict[int, int] = {}  # port -> open file descriptor holding its lock


def reserve(port: int) -> bool:
    """Take the port's lock, held until this process ends; False if this process or
    another one holds it already."""
    if port in _held:
        return False
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
