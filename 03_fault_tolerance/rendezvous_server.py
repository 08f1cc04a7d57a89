"""Lesson 03: a rendezvous store that outlives every training agent.

In an elastic job the torchrun agents meet at a key-value store (the c10d rendezvous
backend). By default an agent hosts it: the one on the machine that `--rdzv_endpoint`
names (torchrun compares the endpoint's host with the machine's names and addresses;
of several agents there, the first to bind the port), not the first agent to arrive.
That agent may never leave: when it goes, the store goes with it and the others cannot
meet again. In production the store lives elsewhere (etcd, or a small always-on host).
This script is that host on one machine: a TCPStore on 127.0.0.1 that any agent can
leave and join (`is_host=false` tells the agents not to host one themselves).

Launch it first, in one terminal, then point every agent at it, in one or two more
(PORT: any free port):

    python rendezvous_server.py PORT
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --nnodes=1:2 --nproc_per_node=1 \\
        --max-restarts=3 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:PORT \\
        --rdzv_id=elastic --rdzv_conf=is_host=false --local-addr=127.0.0.1 \\
        multigpu_torchrun.py 200 1

It runs until it is stopped (Ctrl-C, or SIGTERM).
"""

import signal
from datetime import timedelta

from torch.distributed import TCPStore

from common.cli import LessonArgumentParser

LAUNCH = "python rendezvous_server.py PORT"


def port_number(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ValueError
    return int(text)


def main() -> None:
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument("port", type=port_number, help="TCP port to listen on (a free one)")
    port = parser.parse_args().port
    # wait_for_workers=False: agents come and go; nobody is waited for at the start.
    store = TCPStore(  # noqa: F841 (the server runs as long as this object lives)
        "127.0.0.1", port, is_master=True, wait_for_workers=False, timeout=timedelta(hours=1)
    )
    print(f"rendezvous store listening on 127.0.0.1:{port}", flush=True)
    stop = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)  # delivered to sigwait, not to a handler
    signal.sigwait(stop)
    print("rendezvous store stopped", flush=True)


if __name__ == "__main__":
    main()
