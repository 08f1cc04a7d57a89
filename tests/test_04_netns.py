"""Lesson 04: two hosts with their own addresses (network namespaces joined by a veth
pair). The classic failure is real (gloo listens on the loopback address its hostname
resolves to, and the other host cannot connect), GLOO_SOCKET_IFNAME fixes it, and
nothing is left behind: no namespace, no interface, no file, no process."""

import subprocess

import pytest
from conftest import REPO, is_gone, skip_or_fail

from common import netns
from common.launch import start
from common.ports import free_port

NODE_REPORT = REPO / "04_multinode" / "node_report.py"


@pytest.fixture(autouse=True)
def namespaces_can_be_made():
    skip_or_fail(netns.why_unavailable())


def two_agents(pair, env, expect_failure, timeout):
    """One torchrun agent per host; the rendezvous on node1, found by its name."""
    first, second = pair.hosts
    command = (
        f"torchrun --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d "
        f"--rdzv_endpoint={first.hostname}:{free_port()} --rdzv_id=test "
        f"{NODE_REPORT} --timeout {timeout}"
    )
    agents = [
        start(host.wrap(command), env=env, label=host.hostname, quiet=True) for host in pair.hosts
    ]
    return [agent.wait(120, expect_failure=expect_failure) for agent in agents]


def assert_all_removed(pair):
    names = pair.names()
    assert not set(names) & set(netns.namespaces())
    for name in names:
        assert not (netns.NETNS_ETC / name).exists()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert not any(veth in links for veth in pair._veth)


def test_gloo_binds_to_loopback_and_the_other_host_cannot_connect(tmp_path):
    with netns.HostPair() as pair:
        first_output, second_output = two_agents(pair, env={}, expect_failure=True, timeout=3)
    both = first_output + second_output
    # The rendezvous worked (over eth0): both workers started and reported ...
    assert "host=node1 node_rank=0 local_rank=0 rank=0 world_size=2" in both
    assert "host=node2 node_rank=1 local_rank=0 rank=1 world_size=2" in both
    # ... with hostnames that resolve to a loopback address,
    assert both.count("hostname_resolves_to=127.0.1.1 GLOO_SOCKET_IFNAME=(unset)") == 2
    # so gloo listened there, and the peer's connection to it was refused.
    assert "Gloo connectFullMesh failed" in both
    assert "Connection refused, remote=[127.0.1.1]" in both
    assert "all_reduce(SUM)" not in both
    assert_all_removed(pair)


def test_gloo_socket_ifname_fixes_it(tmp_path):
    with netns.HostPair() as pair:
        first_output, second_output = two_agents(
            pair, env={"GLOO_SOCKET_IFNAME": netns.INTERFACE}, expect_failure=False, timeout=30
        )
    assert "GLOO_SOCKET_IFNAME=eth0" in second_output
    assert "[rank0] all_reduce(SUM) of the ranks = 1 (expected 1)" in first_output
    assert_all_removed(pair)


def test_everything_is_removed_even_after_an_error():
    with pytest.raises(RuntimeError, match="on purpose"), netns.HostPair() as pair:
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
    assert_all_removed(pair)


def test_the_hosts_have_no_route_out():
    with netns.HostPair() as pair:
        for host in pair.hosts:
            routes = subprocess.run(
                ["ip", "-n", host.namespace, "route"], capture_output=True, text=True, check=True
            ).stdout
            # Only the link between the two: no default route, no packet leaves the pair.
            assert routes.split() == [
                "10.47.0.0/24",
                "dev",
                "eth0",
                "proto",
                "kernel",
                "scope",
                "link",
                "src",
                host.address,
            ], routes
            assert "default" not in routes
    assert_all_removed(pair)
