"""Ports: outside the kernel's ephemeral range, and never the same for two processes."""

import fcntl
import multiprocessing
import os
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import PYTHON

from common import port_locks, ports

HOLDER = """
import sys
from common.ports import free_port
print(" ".join(str(free_port()) for _ in range({count})), flush=True)
sys.stdin.read()  # keep the reservations until the test closes our input
"""


def test_a_port_is_outside_the_ephemeral_range_and_can_be_listened_on():
    port = ports.free_port()
    assert port in ports.COURSE_RANGE and port not in ports.ephemeral_range()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # raises if something held it


def test_processes_side_by_side_never_get_the_same_port():
    # Three processes reserve 300 ports each, all at once, and keep them.
    command, pipe = [PYTHON, "-c", HOLDER.format(count=300)], subprocess.PIPE
    holders = [subprocess.Popen(command, stdin=pipe, stdout=pipe, text=True) for _ in range(3)]
    try:
        taken = [set(map(int, holder.stdout.readline().split())) for holder in holders]
    finally:
        for holder in holders:
            holder.communicate("")
    assert [len(ports_of_one) for ports_of_one in taken] == [300, 300, 300]
    assert not (taken[0] & taken[1] or taken[0] & taken[2] or taken[1] & taken[2])
    assert all(holder.returncode == 0 for holder in holders)


def test_a_port_something_listens_on_is_skipped(monkeypatch):
    monkeypatch.setattr(ports, "ephemeral_range", lambda: range(0))  # ports the kernel gave
    with socket.socket() as listener, socket.socket() as probe:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        busy = listener.getsockname()[1]
        probe.bind(("127.0.0.1", 0))
        idle = probe.getsockname()[1]
        probe.close()
        monkeypatch.setattr(ports, "COURSE_RANGE", range(idle, idle + 1))
        assert ports.free_port() == idle
        monkeypatch.setattr(ports, "COURSE_RANGE", range(busy, busy + 1))
        with pytest.raises(RuntimeError, match="no free port"):
            ports.free_port()


def test_an_ephemeral_range_covering_the_course_range_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(ports, "ephemeral_range", lambda: range(1024, 65536))
    with pytest.raises(RuntimeError, match="ip_local_port_range"):
        ports.free_port()


def claim_as_another_user(shared, readonly, taken, free, results) -> None:
    """As nobody when run as root: a free port from the lock folder `shared`, where the
    lock file of `taken` is someone else's, then from `readonly`, which it cannot write."""
    if os.getuid() == 0:
        os.setgid(65534)
        os.setuid(65534)
    ports.COURSE_RANGE, ports.ephemeral_range = range(taken, free + 1), lambda: range(0)
    ports.random.sample = lambda candidates, _: list(candidates)  # their port is tried first
    port_locks.SHARED_LOCK_FOLDER = shared
    first = ports.free_port()
    port_locks.SHARED_LOCK_FOLDER = readonly
    second = ports.free_port()
    own = readonly.with_name(f"readonly-ports-{os.getuid()}")
    results.send(f"{first} {second} {own.is_dir()}")


def test_lock_files_and_folders_of_another_user_are_no_obstacle(tmp_path):
    """A classroom server, where another user's lock file still locks (flock needs only
    read access) and their lock folder makes this user take one of its own. The child is
    nobody when the test runs as root, else this user with the files made unwritable."""
    base = Path(tempfile.mkdtemp(dir="/tmp", prefix="ports-test-"))
    try:
        os.chmod(base, 0o1777)
        shared, readonly = base / "ddp-course-ports", base / "readonly-ports"
        shared.mkdir(mode=0o1777)
        os.chmod(shared, 0o1777)
        readonly.mkdir()
        taken, free = ports.COURSE_RANGE[:2]
        held = os.open(shared / f"{taken}.lock", os.O_RDWR | os.O_CREAT, 0o444)
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running job of theirs
        os.chmod(shared / f"{taken}.lock", 0o444)
        os.chmod(readonly, 0o555)
        # A child of the forkserver, which has one thread: fork() there cannot deadlock.
        context = multiprocessing.get_context("forkserver")
        receiver, sender = context.Pipe(duplex=False)
        child = context.Process(
            target=claim_as_another_user, args=(shared, readonly, taken, free, sender)
        )
        child.start()
        child.join(timeout=120)
        said = receiver.recv() if receiver.poll() else "(it said nothing)"
        os.close(held)
        assert child.exitcode == 0, said
        # Their lock held: the free port. Then, in a folder of its own: the first one.
        assert said == f"{free} {taken} True"
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=True)
