"""Lesson 04, troubleshooting: a rendezvous that never completes, one node missing.

The job is declared with two nodes (`--nnodes=2`), but only one agent starts: the
other node's command was never run, its job was not scheduled, or it points at
another endpoint or another `--rdzv_id`. The agent that came waits for the other
for `join_timeout` seconds (600 by default; 5 here), then gives up.

    python missing_node.py       # exits non-zero with torchrun's error

Fix: start every node's agent with the same `--rdzv_endpoint` and `--rdzv_id`; the
agents' logs show which ones joined.
"""

import sys
from pathlib import Path

from common.cli import LessonArgumentParser
from common.launch import CommandFailed, CommandTimedOut, run
from common.ports import free_port

LAUNCH = "python missing_node.py"

NODE_REPORT = Path(__file__).resolve().parent.parent / "node_report.py"
JOIN_TIMEOUT = 5


def main() -> int:
    LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH).parse_args()
    endpoint = f"127.0.0.1:{free_port()}"
    print(f"node 0 of 2 starts; node 1 never will. join_timeout={JOIN_TIMEOUT} s")
    try:
        run(
            f"torchrun --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d "
            f"--rdzv_endpoint={endpoint} --rdzv_id=missing "
            f"--rdzv_conf=join_timeout={JOIN_TIMEOUT} {NODE_REPORT}",
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
