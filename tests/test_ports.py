"""Ports: outside the kernel's ephemeral range, and never the same for two processes."""

import socket
import subprocess

import pytest
from conftest import PYTHON

from common import ports

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
    holders = [
        subprocess.Popen(
            [PYTHON, "-c", HOLDER.format(count=300)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    try:
        taken = [set(map(int, holder.stdout.readline().split())) for holder in holders]
    finally:
        for holder in holders:
            holder.communicate("")
    assert [len(ports_of_one) for ports_of_one in taken] == [300, 300, 300]
    assert not (taken[0] & taken[1] or taken[0] & taken[2] or taken[1] & taken[2])
    assert all(holder.returncode == 0 for holder in holders)


def test_a_port_something_listens_on_is_skipped(monkeypatch):
    with socket.socket() as listener, socket.socket() as probe:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        busy = listener.getsockname()[1]
        probe.bind(("127.0.0.1", 0))
        idle = probe.getsockname()[1]
        probe.close()
        monkeypatch.setattr(ports, "candidate_ports", lambda: [busy, idle])
        assert [ports.free_port()] == [idle]  # whichever it tried first
        monkeypatch.setattr(ports, "candidate_ports", lambda: [busy])
        with pytest.raises(RuntimeError, match="no free port"):
            ports.free_port()


def test_an_ephemeral_range_covering_the_course_range_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(ports, "ephemeral_range", lambda: range(1024, 65536))
    with pytest.raises(RuntimeError, match="ip_local_port_range"):
        ports.candidate_ports()
