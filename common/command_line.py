"""What a launch's command line says: which Python runs it, how many processes it starts
on this machine, and whether all of torchrun's agents are on this machine.

Introduced in 00_intro with `common.launch`, which reads every command with these.
"""

import re
import sys


def resolve(argv: list[str]) -> list[str]:
    """Point `torchrun` and `python` at the interpreter running this code, so that a
    notebook never picks up another environment's torch from the PATH."""
    if argv and argv[0] == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", *argv[1:]]
    if argv and argv[0] in ("python", "python3"):
        return [sys.executable, *argv[1:]]
    return argv


LOOPBACK_ENDPOINT = re.compile(r"^(127\.0\.0\.1|localhost):\d+$")
PROCESS_COUNT = re.compile(r"--(?:nproc_per_node|nproc-per-node|world_size)[= ](\d+)\b")


def processes_per_machine(command: str) -> int | None:
    """How many processes a launch starts on this machine: torchrun's
    `--nproc_per_node`, or `--world_size` for a script that spawns its own (lesson 02)."""
    found = PROCESS_COUNT.search(command)
    return int(found[1]) if found else None


def on_this_machine_only(torchrun_argv: list[str]) -> bool:
    """True for torchrun's `--standalone`, and for a rendezvous at 127.0.0.1 or
    localhost, which only agents on this machine can reach."""
    if "--standalone" in torchrun_argv:
        return True
    for i, arg in enumerate(torchrun_argv):
        name, _, value = arg.partition("=")
        if name in ("--rdzv_endpoint", "--rdzv-endpoint"):
            if not value and i + 1 < len(torchrun_argv):
                value = torchrun_argv[i + 1]
            return bool(LOOPBACK_ENDPOINT.match(value))
    return False
