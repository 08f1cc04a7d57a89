"""Find and kill every process a command started, however deep.

Introduced in 00_intro; used by `common.launch` (and so by every lesson notebook) and
by the course's network-namespace hosts.

torchrun starts each worker in a session of its own, and a worker whose launcher
died is adopted by init, so neither the process group nor the parent-child tree
finds them all. The environment does: every process inherits the variables of its
parent, so a marker variable whose value is unique to one command tags all of its
processes, and only its.
"""

import signal
import uuid

import psutil

MARKER_VARIABLE = "COURSE_LAUNCH_ID"
# Seconds between SIGTERM (torchrun forwards it to its workers and cleans up) and
# SIGKILL for whatever is still alive.
GRACE_SECONDS = 5.0


class ProcessTree:
    """The processes of one command: put `environment()` into the command's
    environment, and `kill()` ends it and everything it started."""

    def __init__(self):
        self.marker = uuid.uuid4().hex

    def environment(self) -> dict[str, str]:
        return {MARKER_VARIABLE: self.marker}

    def members(self) -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter():
            try:
                if proc.environ().get(MARKER_VARIABLE) == self.marker:
                    found.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass  # gone, not ours, or already dead
        return found

    def kill(self) -> None:
        """End the command and everything it started."""
        terminate(self.members())


def workers_of_rank(rank: int, processes=None, **variables: str) -> list[psutil.Process]:
    """torchrun's workers of global rank `rank` among `processes` (default: every process)
    whose environment holds `variables`: one, in a running job. torchrun gives each
    worker RANK and LOCAL_RANK, and the worker's own children (data loaders) inherit
    them, so the worker is the one whose parent is not of that rank."""
    wanted = {"RANK": str(rank), **variables}
    of_rank = {}
    for proc in psutil.process_iter() if processes is None else processes:
        try:
            environ = proc.environ()
            if "LOCAL_RANK" in environ and wanted.items() <= environ.items():
                of_rank[proc.pid] = proc
        except psutil.Error:
            pass  # ended meanwhile, or not ours to read
    return [proc for proc in of_rank.values() if proc.ppid() not in of_rank]


def terminate(processes: list[psutil.Process]) -> None:
    """SIGTERM every process (torchrun then stops its workers cleanly), wait a
    little, then SIGKILL whatever is still alive."""
    alive = processes
    for signum in (signal.SIGTERM, signal.SIGKILL):
        for proc in alive:
            try:
                proc.send_signal(signum)
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(alive, timeout=GRACE_SECONDS)
        if not alive:
            return
