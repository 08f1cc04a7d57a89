"""Lesson 04's two hosts (network namespaces joined by a veth pair): no route out, and
nothing left behind even after an error. (gloo on the loopback address its hostname
resolves to, and the fix, GLOO_SOCKET_IFNAME, are checked by lesson 04's notebook.)"""

import subprocess

import pytest
from conftest import is_gone, skip_or_fail

from course.cluster import netns


def test_the_hosts_have_no_route_out_and_leave_nothing_even_after_an_error():
    skip_or_fail(netns.why_unavailable())
    with pytest.raises(RuntimeError, match="on purpose"), netns.HostPair() as pair:
        for host in pair.hosts:
            routes = subprocess.run(
                ["ip", "-n", host.namespace, "route"], capture_output=True, text=True, check=True
            ).stdout
            # Only the link between the two: no default route, no packet leaves the pair.
            assert routes.split() == [
                *("10.47.0.0/24", "dev", "eth0", "proto", "kernel", "scope", "link", "src"),
                host.address,
            ], routes
        host = pair.hosts[1]
        sleeper = subprocess.Popen(
            host.wrap("python -c 'import time; print(\"in\", flush=True); time.sleep(600)'"),
            shell=True,
            stdout=subprocess.PIPE,
            text=True,
        )
        # It prints once it runs inside the namespace (or ends, and readline returns "").
        assert sleeper.stdout.readline() == "in\n"
        # The namespace is in use: `ip netns pids` lists the sleeper.
        listing = subprocess.run(["ip", "netns", "pids", host.namespace], capture_output=True)
        pids = [int(pid) for pid in listing.stdout.split()]
        assert pids
        raise RuntimeError("on purpose")
    sleeper.wait(timeout=30)
    assert all(is_gone(pid) for pid in pids)
    names = pair.names()
    assert not set(names) & set(netns.namespaces())
    for name in names:
        assert not (netns.NETNS_ETC / name).exists()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert not any(veth in links for veth in pair._veth)
