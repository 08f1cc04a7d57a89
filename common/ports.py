"""A free TCP port for a server a lesson starts itself (the rendezvous of `mp.spawn`, a
c10d endpoint, Slurm's daemons), so that no script needs a port number written into it.

Introduced in 02_multigpu (`multigpu.py` picks the port its processes meet at); used by
`common.launch` (the `{port}` placeholder), lessons 03 and 04, the local Slurm cluster
(`course.cluster`) and the tests.
"""

import random
import socket
from pathlib import Path

from common.port_locks import reserve

# Below Linux's default ephemeral range (32768-60999) and macOS's (49152-65535).
COURSE_RANGE = range(20000, 32768)


def free_port() -> int:
    """A TCP port that nothing listens on, below the kernel's ephemeral range.

    The usual trick, bind port 0 and close the socket, takes a port from the ephemeral
    range, where every outgoing connection (gloo's, another job's) takes its local port:
    one can take it in the seconds before the job listens on it. Below that range no
    connection does. `reserve` keeps the port from the other processes of the course
    while this one lives: tests and notebooks run side by side (common/port_locks.py)."""
    ephemeral = ephemeral_range()
    candidates = [port for port in COURSE_RANGE if port not in ephemeral]
    for port in random.sample(candidates, len(candidates)):
        if reserve(port) and nothing_listens(port):
            return port
    raise RuntimeError(
        f"no free port in {COURSE_RANGE.start}-{COURSE_RANGE.stop - 1} outside the kernel's "
        f"ephemeral range {ephemeral.start}-{ephemeral.stop - 1}: all in use, or that range "
        "covers them all (narrow it: sysctl net.ipv4.ip_local_port_range)"
    )


def nothing_listens(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def ephemeral_range() -> range:
    """The kernel's range for the local ports of outgoing connections (Linux reports it;
    elsewhere the IANA range that macOS uses)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return range(int(low), int(high) + 1)
    except (OSError, ValueError):
        return range(49152, 65536)
