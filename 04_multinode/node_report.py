"""Lesson 04: who is who in a job of several nodes.

Every process reports the node it runs on (hostname, torchrun's node rank), its
local rank (which picks its device on that node) and its global rank (which
names it in the whole job), and the address its hostname resolves to: gloo
listens there unless GLOO_SOCKET_IFNAME names a network interface. Then one
all_reduce of the global ranks proves that every process can reach every other.

Launch it as two nodes on one machine, the same command in two terminals, with PORT
a free port (c10d numbers the nodes itself, sorting the agents by address, then
process id; it ignores --node_rank):

    torchrun --nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d \\
        --rdzv_endpoint=127.0.0.1:PORT --rdzv_id=demo node_report.py

or with the static rendezvous, where you number the nodes:

    torchrun --nnodes=2 --node_rank=0 --nproc_per_node=2 --master_addr=127.0.0.1 \\
        --master_port=PORT node_report.py      # then --node_rank=1 in the other terminal

`--timeout S` (default 60) bounds, in seconds, how long the processes wait for
each other: a connection that cannot be made fails after S seconds, not after the
process group's default timeout. `--stay_until FILE` keeps every process in the job,
after its report, until FILE exists (at most S seconds): lesson 04 reads the job's
listening sockets meanwhile, then creates the file.
"""

import os
import socket
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from common.cli import LessonArgumentParser, positive_seconds
from common.distributed import device_for, end_process, log, log0, torchrun_env

LAUNCH = "torchrun --standalone --nproc_per_node=2 node_report.py"


def resolved_address(hostname: str) -> str:
    try:
        return socket.gethostbyname(hostname)
    except OSError as error:
        return f"unresolved ({error})"


def main() -> None:
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=60.0,
        help="seconds to wait for the other processes",
    )
    parser.add_argument("--stay_until", type=Path, help="a file: stay in the job until it exists")
    args = parser.parse_args()
    if args.timeout <= 0:
        parser.error(f"--timeout must be positive, not {args.timeout:g}")
    local_rank, global_rank, world_size = torchrun_env(launch_hint=LAUNCH)
    node_rank = int(os.environ.get("GROUP_RANK", 0))  # torchrun's number for this node

    device = device_for(local_rank)
    hostname = socket.gethostname()
    log(
        f"host={hostname} node_rank={node_rank} local_rank={local_rank} "
        f"rank={global_rank} world_size={world_size} device={device} "
        f"hostname_resolves_to={resolved_address(hostname)} "
        f"GLOO_SOCKET_IFNAME={os.environ.get('GLOO_SOCKET_IFNAME', '(unset)')}"
    )
    dist.init_process_group(
        backend=dist.get_default_backend_for_device(device),
        device_id=device if device.type == "cuda" else None,  # nccl: this GPU, connect now
        timeout=timedelta(seconds=args.timeout),
    )
    # The first collective makes gloo connect every pair of processes.
    value = torch.tensor([float(global_rank)], device=device)
    dist.all_reduce(value)
    expected = world_size * (world_size - 1) // 2
    log0(f"all_reduce(SUM) of the ranks = {value.item():g} (expected {expected})")
    if args.stay_until and not appears(args.stay_until, args.timeout):
        log(f"{args.stay_until} did not appear within {args.timeout:g} s (--stay_until)")
        dist.destroy_process_group()
        sys.exit(1)
    dist.destroy_process_group()


def appears(path: Path, timeout: float) -> bool:
    """True once `path` exists, False if it still does not after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


if __name__ == "__main__":
    main()
    end_process()  # not Python's teardown: see common.distributed.end_process
