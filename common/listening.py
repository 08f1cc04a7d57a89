"""What a running job listens on, read from its processes: every listening TCP socket of
torchrun's agent and of its workers, with its address, who can reach it, and what it is.

Introduced in 04_multinode ("What a job exposes on the network"); `course.setup_check`
uses `outside_addresses`, and lesson 04's `hangs/hang_tools.py` `tcp_sockets`.
"""

import ipaddress
from dataclasses import dataclass

import psutil

# The addresses a socket listens on to accept connections on every interface.
EVERYWHERE = {"0.0.0.0", "::"}


@dataclass(frozen=True)
class Listener:
    process: str  # "agent", "rank 0", ...
    pid: int
    address: str  # as the kernel reports it: "::", "0.0.0.0", "127.0.0.1", ...
    port: int
    what: str

    @property
    def reachable_from(self) -> str:
        if self.address in EVERYWHERE:
            return "every network this machine is on"
        if ipaddress.ip_address(self.address).is_loopback:
            return "this machine only"
        return f"the network of {self.address}"


def tcp_sockets(process: psutil.Process) -> list:
    """Every TCP socket of `process`, as psutil reports them (status, laddr, raddr)."""
    # psutil 6 renamed connections() to net_connections()
    listing = getattr(process, "net_connections", None) or process.connections
    return listing(kind="tcp")


def _listening(process: psutil.Process) -> list[tuple[str, int]]:
    found = {(c.laddr.ip, c.laddr.port) for c in tcp_sockets(process) if c.status == "LISTEN"}
    return sorted(found, key=lambda address: address[1])


def job_listeners(agent_pid: int) -> list[Listener]:
    """The listening sockets of the torchrun agent `agent_pid` and of its workers (the
    processes it started that have a RANK), the agent's first. The workers' store is the
    agent's socket on the workers' MASTER_PORT; the agent's other one is its rendezvous
    store (c10d); a worker's own is its process group's listener, which the other ranks
    connect to (gloo's; on GPUs, nccl's bootstrap)."""
    agent = psutil.Process(agent_pid)
    workers = {}
    for child in agent.children(recursive=True):
        environment = child.environ()
        if "RANK" in environment:
            workers[int(environment["RANK"])] = (child, int(environment["MASTER_PORT"]))
    master_ports = {port for _, port in workers.values()}
    listeners = []
    for address, port in _listening(agent):
        what = (
            "the workers' store (MASTER_PORT): every rank connects to it"
            if port in master_ports
            else "the rendezvous store (c10d): every agent connects to it"
        )
        listeners.append(Listener("agent", agent.pid, address, port, what))
    for rank, (worker, _) in sorted(workers.items()):
        for address, port in _listening(worker):
            what = "rank's process-group listener: the other ranks connect to it"
            listeners.append(Listener(f"rank {rank}", worker.pid, address, port, what))
    return listeners


def table(listeners: list[Listener]) -> str:
    rows = [f"{'process':<8} {'pid':>7}  {'listens on':<22} {'reachable from':<33} what"]
    for listener in listeners:
        where = f"[{listener.address}]:{listener.port}"
        rows.append(
            f"{listener.process:<8} {listener.pid:>7}  {where:<22} "
            f"{listener.reachable_from:<33} {listener.what}"
        )
    return "\n".join(rows)


def outside_addresses() -> list[tuple[str, str]]:
    """(interface, address) of every address of this machine that is not loopback nor
    link-local: where other machines can reach a socket that listens everywhere."""
    found = []
    for interface, addresses in psutil.net_if_addrs().items():
        for address in addresses:
            if address.family.name not in ("AF_INET", "AF_INET6"):
                continue
            ip = ipaddress.ip_address(address.address.split("%")[0])
            if not (ip.is_loopback or ip.is_link_local):
                found.append((interface, str(ip)))
    return found


def check_exposure(listeners: list[Listener], world_size: int) -> str:
    """Lesson 04's claims about a job on one machine, with this PyTorch: the agent's two
    stores listen on every interface, and each rank has a listener of its own. Raises
    AssertionError naming what differs; returns what held."""
    agent = [listener for listener in listeners if listener.process == "agent"]
    stores = sorted(listener.what.split(" (")[0] for listener in agent)
    assert stores == ["the rendezvous store", "the workers' store"], stores
    narrow = [listener for listener in agent if listener.address not in EVERYWHERE]
    assert not narrow, f"an agent store no longer listens on every interface: {narrow}"
    ranks = sorted({listener.process for listener in listeners} - {"agent"})
    assert ranks == [f"rank {rank}" for rank in range(world_size)], ranks
    return (
        "the agent's rendezvous store and workers' store listen on every interface; "
        f"each of the {world_size} ranks listens on a port of its own"
    )
