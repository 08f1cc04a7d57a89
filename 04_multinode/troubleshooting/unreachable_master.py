"""Lesson 04, troubleshooting: a node cannot reach the master.

Node 1 is started with the master's address and port, but nothing answers there:
a wrong address or port, a master node that has not started (or already failed),
or a firewall between the nodes. Its agent keeps trying to connect to the
rendezvous store for `timeout` seconds (600 by default; 3 here), then gives up.
Here the master's port is a free port on 127.0.0.1 that nobody listens on.

    python unreachable_master.py     # exits non-zero with torchrun's error

Fix: check `--master_addr`/`--master_port` (or `--rdzv_endpoint`), start node 0
first, and check that the port is open between the nodes (`nc -zv HOST PORT`).
"""

import sys
from pathlib import Path

from common.cli import LessonArgumentParser
from common.launch import CommandFailed, CommandTimedOut, run
from common.ports import free_port

LAUNCH = "python unreachable_master.py"

NODE_REPORT = Path(__file__).resolve().parent.parent / "node_report.py"
TIMEOUT = 3


def main() -> int:
    LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH).parse_args()
    port = free_port()
    print(f"node 1 of 2 looks for its master at 127.0.0.1:{port}, where nothing listens")
    try:
        run(
            f"torchrun --nnodes=2 --node_rank=1 --nproc_per_node=1 --master_addr=127.0.0.1 "
            f"--master_port={port} --rdzv_conf=timeout={TIMEOUT} {NODE_REPORT}",
            timeout=60,
        )
    except CommandTimedOut as timeout:  # a hang is not the failure shown here
        sys.exit(f"did not fail, but ran past its time limit: {timeout}")
    except CommandFailed as failure:
        print(f"failed as expected: {failure}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
