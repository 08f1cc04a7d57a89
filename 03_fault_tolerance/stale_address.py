"""Lesson 03: why a restarted group can fail to meet when torchrun shares its store.

In recent releases (since pytorch/pytorch#128096, in 2024), torchrun's agent of
rendezvous rank 0 creates a second TCPStore beside its rendezvous store, lends it to
the workers (MASTER_ADDR:MASTER_PORT), and keeps that one store for every restart
(pytorch/pytorch#135712, #167288). Each worker that joins a gloo group publishes its
address in the store and reads the others' addresses from it. The keys are the same
at every attempt, so a restarted worker can read the address that a dead worker of the
previous attempt published, before its successor has written its own.

Attempt 0: the two workers meet, all-reduce once, and rank 1 kills itself. Attempt 1:
torchrun restarts both. Rank 0 looks for rank 1's address in the store, then joins;
rank 1 joins a moment later (once rank 0 has looked and published its own new
address), as a process that starts slower does. Gloo lets one side of a pair dial and
the other wait to be dialed: the side whose port is higher, compared as gloo compares
them (see `as_gloo_compares`), dials. Each side decides with the addresses it read:

- rank 0 decides against the dead worker's port. If it dials, nobody answers there:
  it gives up at once ("Connection refused");
- if rank 0 waits, rank 1 (deciding against rank 0's new port) dials, and they meet;
  or it waits too, and both wait until the timeout (with gloo's default timeout, a
  30-minute hang).

The kernel picks the ports at random, so the outcome changes from launch to launch;
rank 0 prints the three ports, what each side did, and what follows from it. A side
that waits gives up after a few times `--timeout` (1 s; each rank prints how long it
tried). With TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 the second attempt has a store of
its own, which worker rank 0 starts in init_process_group: nothing of attempt 0 is in
it, and the group meets.

Launch it (from any folder, with the path to this file):

    torchrun --standalone --nproc_per_node=2 --max-restarts=1 stale_address.py
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --standalone --nproc_per_node=2 \\
        --max-restarts=1 stale_address.py

It exits 0 when it could show what it describes, whatever the outcome of the meeting.
"""

import os
import signal
import struct
import sys
import time
from datetime import timedelta
from typing import NoReturn

import torch
import torch.distributed as dist

from common.cli import LessonArgumentParser, positive_int
from common.distributed import end_process, job_store, log, torchrun_env

LAUNCH = "torchrun --standalone --nproc_per_node=2 --max-restarts=1 stale_address.py"
ROOMY = timedelta(seconds=60)  # for the meetings that are not the demonstration


def published_port(rank: int, store: dist.Store | None = None) -> int | None:
    """The port of the address gloo published in the store for `rank`, None if there is
    none. Gloo's key for rank r is "r", under the prefixes torch 2.14 puts in front of
    it: the default group's, the group's name ("0"), the device ("cpu") and gloo's
    context ("0")."""
    store = store or job_store()
    for prefix in ("default_pg", "0/", "cpu/", "0"):
        store = dist.PrefixStore(prefix, store)
    if not store.check([str(rank)]):
        return None
    # The value: hostname length (8 bytes), hostname, address length (8 bytes), then
    # the address, a sockaddr: family (2 bytes), port (2 bytes, network order), ...
    value = store.get(str(rank))
    (hostname_length,) = struct.unpack_from("=Q", value, 0)
    address = 8 + hostname_length + 8
    (port,) = struct.unpack_from("!H", value, address + 2)
    return port


def as_gloo_compares(port: int) -> int:
    """Gloo compares two ports as they sit in a sockaddr: in network byte order (big
    endian), read as a number of this machine's order. On a little-endian CPU (x86,
    Arm) that swaps the bytes: port 45601 (0xB221) counts as 8626 (0x21B2), the number
    gloo's own error messages print for it."""
    return int.from_bytes(port.to_bytes(2, "big"), sys.byteorder)


def role(own: int, peer: int) -> str:
    """What gloo has a process do for a pair: dial when its own port (compared as gloo
    compares it) is the higher, else wait to be dialed."""
    return "dials" if as_gloo_compares(own) > as_gloo_compares(peer) else "waits"


# What follows from the two decisions (rank 0's made with the dead worker's address).
PREDICTION = {
    ("dials", "dials"): "rank 0 finds nobody at the dead port and gives up at once",
    ("dials", "waits"): "rank 0 finds nobody at the dead port and gives up at once",
    ("waits", "dials"): "they meet",
    ("waits", "waits"): "each waits for the other until the timeout",
}


def main() -> None:
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument(
        "--timeout", type=positive_int, default=1, help="seconds to meet at the restart"
    )
    args = parser.parse_args()
    _, rank, world_size = torchrun_env(launch_hint=LAUNCH)
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    max_restarts = int(os.environ["TORCHELASTIC_MAX_RESTARTS"])
    if world_size != 2 or max_restarts < 1:
        parser.error(
            f"it needs 2 processes and a restart (--nproc_per_node=2 --max-restarts=1), "
            f"not {world_size} process(es) and --max-restarts={max_restarts}"
        )
    if attempt == 0:
        first_attempt(rank)
    elif os.environ["TORCHELASTIC_USE_AGENT_STORE"] == "True":  # torchrun's own store
        restart_in_the_shared_store(rank, timedelta(seconds=args.timeout))
    else:
        restart_in_a_store_of_its_own(rank)


def first_attempt(rank: int) -> NoReturn:
    """Meet, all-reduce once, note the address each published; then rank 1 dies."""
    dist.init_process_group("gloo", timeout=ROOMY)
    dist.all_reduce(torch.ones(1))
    store = job_store()
    port = published_port(rank, store)
    store.set(f"stale_address/attempt0_rank{rank}", str(port))
    log(f"attempt 0: met; my address in the store has port {port}")
    dist.barrier()  # both have noted theirs
    if rank == 1:
        log("attempt 0: killing myself")
        os.kill(os.getpid(), signal.SIGKILL)  # no goodbye, as a crash
    try:
        dist.barrier()
    except RuntimeError:
        log("attempt 0: rank 1 is gone; torchrun restarts the group")
    end_process(1)


def restart_in_the_shared_store(rank: int, timeout: timedelta) -> NoReturn:
    """Rank 0 looks for rank 1's address and then joins; rank 1 is slower: it joins
    once rank 0 has looked and published its new address (as a process that starts a
    moment late would). Then rank 0 tells which ports decided what each did."""
    store = job_store()
    noted = {r: int(store.get(f"stale_address/attempt0_rank{r}")) for r in (0, 1)}
    if rank == 0:
        stale = published_port(1, store)
        log(
            f"attempt 1: rank 1's address is already in the store: port {stale} "
            f"(rank 1 of attempt 0, now dead, published port {noted[1]})"
        )
        store.set("stale_address/looked", "yes")
    else:
        store.wait(["stale_address/looked"])
        while published_port(0, store) == noted[0]:  # until rank 0 has published its new one
            time.sleep(0.01)
    begin = time.monotonic()
    try:
        dist.init_process_group("gloo", timeout=timeout)
        dist.all_reduce(torch.ones(1))
        outcome = "met"
    except RuntimeError as error:
        outcome = f"did not meet: {str(error).splitlines()[0]}"
    log(f"attempt 1: {outcome} ({time.monotonic() - begin:.1f} s)")
    if rank == 1:  # tell rank 0 the port this attempt's rank 1 published
        store.set("stale_address/attempt1_rank1", str(published_port(1, store)))
    else:
        mine, theirs = published_port(0, store), int(store.get("stale_address/attempt1_rank1"))
        rank0, rank1 = role(mine, stale), role(theirs, mine)
        log(
            f"ports: rank 0 {mine}, rank 1 of attempt 0 {stale}, rank 1 {theirs}. "
            f"gloo: rank 0 {rank0} (its port against {stale}), "
            f"rank 1 {rank1} (its port against {mine}): {PREDICTION[rank0, rank1]}"
        )
    end_process()


def restart_in_a_store_of_its_own(rank: int) -> NoReturn:
    """With TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: worker rank 0 starts this attempt's
    store in init_process_group, so nothing of attempt 0 can be found in it."""
    if rank == 0:
        log("attempt 1: this attempt has a store of its own, which init_process_group starts")
    dist.init_process_group("gloo", timeout=ROOMY)
    dist.all_reduce(torch.ones(1))
    log("attempt 1: met")
    dist.barrier()  # rank 0 hosts the store: it leaves last
    dist.destroy_process_group()
    end_process()


if __name__ == "__main__":
    main()
