"""Two "hosts" on one Linux machine: network namespaces joined by a virtual cable.

Introduced in 04_multinode (its notebook and tests); needs root and `ip` (iproute2).

`HostPair()` makes two network namespaces, each with its own loopback and one
interface `eth0`, the two ends of a veth pair, with addresses 10.47.0.1/24 and
10.47.0.2/24. Each host gets its own hostname (`node1`, `node2`) and its own
/etc/hosts, written the way a Debian installer writes it: the host's own name on
127.0.1.1, the other host on its real address. So, as on many real clusters, a
program that looks up its own hostname gets a loopback address, which no other
host can reach.

The namespaces have no route anywhere else: nothing run inside them can send a
packet to any address but the two hosts'. Everything is removed on the way out,
whatever happened: processes still running in the namespaces, the namespaces, the
veth pair, and the per-namespace files under /etc/netns.
"""

import shlex
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil

from common.command_line import resolve
from common.processes import terminate
from course.system_packages import is_root

TOOLS = {"ip": "iproute2", "unshare": "util-linux"}  # program: its Debian package
NETNS_ETC = Path("/etc/netns")  # `ip netns exec NAME` mounts /etc/netns/NAME/* over /etc/*
INTERFACE = "eth0"


def why_unavailable() -> str | None:
    """None when namespaces can be made here; else one line saying why not."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces are a Linux feature (this is {sys.platform})"
    if not is_root():
        return "making network namespaces needs root (`ip netns add`); run as root to see it"
    for tool, package in TOOLS.items():
        if shutil.which(tool) is None:
            return f"`{tool}` not found: install {package} (sudo python3 -m course.system_packages)"
    # Root is not enough in an unprivileged container: try it for real.
    probe = f"ddp-course-probe-{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        why = (made.stderr.strip().splitlines() or ["no message"])[-1]
        return f"cannot make a network namespace here (`ip netns add`: {why})"
    subprocess.run(["ip", "netns", "delete", probe], capture_output=True)
    return None


@dataclass
class Host:
    namespace: str  # the network namespace's name, as `ip netns list` shows it
    hostname: str
    address: str  # on eth0

    def wrap(self, command: str) -> str:
        """`command` run on this host: in its namespace, under its own hostname.
        `torchrun` and `python` mean this Python environment's, as in `common.launch`."""
        inner = shlex.join(resolve(shlex.split(command)))
        return shlex.join(
            [
                "ip",
                "netns",
                "exec",
                self.namespace,
                # A UTS namespace of its own, so setting the hostname touches nothing else.
                "unshare",
                "--uts",
                "--",
                "sh",
                "-c",
                f"hostname {self.hostname} && exec {inner}",
            ]
        )


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


class HostPair:
    """Two hosts joined by a veth cable. Use as a context manager."""

    def __init__(self, subnet: str = "10.47.0", hostnames=("node1", "node2")):
        tag = uuid.uuid4().hex[:6]  # unique: parallel tests each get their own pair
        self.hosts = [
            Host(f"ddp-{tag}-{name}", name, f"{subnet}.{i}")
            for i, name in enumerate(hostnames, start=1)
        ]
        self._veth = [f"ddp{tag}v{i}" for i in range(len(hostnames))]

    def __enter__(self) -> "HostPair":
        try:
            self.create()
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.remove()

    def create(self) -> None:
        reason = why_unavailable()
        if reason:
            raise RuntimeError(reason)
        first, second = self.hosts
        for host in self.hosts:
            _ip("netns", "add", host.namespace)
        _ip("link", "add", self._veth[0], "type", "veth", "peer", "name", self._veth[1])
        for host, veth in zip(self.hosts, self._veth, strict=True):
            _ip("link", "set", veth, "netns", host.namespace)
            _ip("-n", host.namespace, "link", "set", veth, "name", INTERFACE)
            _ip("-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", INTERFACE)
            _ip("-n", host.namespace, "link", "set", INTERFACE, "up")
            _ip("-n", host.namespace, "link", "set", "lo", "up")
            other = second if host is first else first
            etc = NETNS_ETC / host.namespace
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(
                "127.0.0.1 localhost\n"
                f"127.0.1.1 {host.hostname}\n"  # the Debian default, and the trap
                f"{host.address} {host.hostname}-{INTERFACE}\n"  # so reverse lookups answer
                f"{other.address} {other.hostname}\n"
            )
            # No name server: a lookup of an unknown name fails at once, sending nothing.
            (etc / "resolv.conf").write_text("")

    def remove(self) -> None:
        for host in self.hosts:
            self._kill_processes_in(host.namespace)
            _ip("netns", "delete", host.namespace, check=False)
            shutil.rmtree(NETNS_ETC / host.namespace, ignore_errors=True)
        for veth in self._veth:  # gone with its namespace, unless creation failed midway
            _ip("link", "delete", veth, check=False)
        # /etc/netns itself stays: iproute2's own folder, which another HostPair (a test
        # running beside this one) may be creating a host's folder in right now.

    @staticmethod
    def _kill_processes_in(namespace: str) -> None:
        """A namespace lives on while a process runs in it: end them first."""
        result = _ip("netns", "pids", namespace, check=False)
        alive = []
        for pid in result.stdout.split():
            try:
                alive.append(psutil.Process(int(pid)))
            except psutil.NoSuchProcess:
                pass
        terminate(alive)

    def names(self) -> list[str]:
        return [host.namespace for host in self.hosts]


def namespaces() -> list[str]:
    """The network namespaces that `ip netns list` shows."""
    result = _ip("netns", "list", check=False)
    return [line.split()[0] for line in result.stdout.splitlines() if line.strip()]
