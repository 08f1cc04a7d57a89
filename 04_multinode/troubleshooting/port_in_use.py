"""Lesson 04, troubleshooting: the port given to torchrun is already in use.

This script takes a free port and listens on it, as a forgotten job or another
user's would, then starts torchrun with `--master_port` set to that port. The agent
of node 0 must open the rendezvous server there and cannot: torchrun stops at once
with EADDRINUSE. (With `--rdzv_backend=c10d` an agent that cannot open the server
tries to join it as a client instead, and then waits for a rendezvous that the
squatter never answers: the message is a timeout, harder to read.)

    python port_in_use.py        # exits non-zero with torchrun's error

Fix: pick a free port (`--standalone` on one machine), or end what holds it
(`ss -ltnp | grep PORT` shows who).
"""

import socket
import sys
from pathlib import Path

from common.cli import LessonArgumentParser
from common.launch import CommandFailed, CommandTimedOut, run

LAUNCH = "python port_in_use.py"

NODE_REPORT = Path(__file__).resolve().parent.parent / "node_report.py"


def main() -> int:
    LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH).parse_args()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        print(f"port {port} on 127.0.0.1 is held by this script; torchrun is told to use it")
        try:
            run(
                f"torchrun --nnodes=1 --nproc_per_node=2 --master_addr=127.0.0.1 "
                f"--master_port={port} {NODE_REPORT} --timeout 10",
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
