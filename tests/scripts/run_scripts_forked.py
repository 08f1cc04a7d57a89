"""Run many `python SCRIPT ARGS...` commands fast, each as the interpreter would: torch
is imported once (~2.5 s), then a child is forked per command, with sys.argv, sys.path[0]
and the exit status of `python SCRIPT`. Only torch is imported before the fork, so no
course module leaks from one script to the next. Reads [[script, [arguments...]], ...] as
JSON on stdin, prints [{"status", "stdout", "stderr"}, ...]. Run it in a temporary folder.
"""

import json
import os
import runpy
import sys
import tempfile
import traceback

# What this process exists to share (torch._dynamo: at the first optimizer or DDP, ~2 s).
import torch._dynamo  # noqa: F401

# What torchrun sets: a command here must look started by plain python.
TORCHRUN_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
TORCHRUN_VARIABLES += ("MASTER_ADDR", "MASTER_PORT")


def child(script: str, arguments: list[str], stdout_fd: int, stderr_fd: int) -> None:
    os.dup2(stdout_fd, 1)
    os.dup2(stderr_fd, 2)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    sys.argv = [script, *arguments]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    for name in TORCHRUN_VARIABLES:
        os.environ.pop(name, None)
    status = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exit:
        if exit.code is None or isinstance(exit.code, int):
            status = exit.code or 0
        else:
            print(exit.code, file=sys.stderr)
            status = 1
    except BaseException:
        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def run(script: str, arguments: list[str]) -> dict:
    # Files, not pipes: a child that writes a lot cannot block on a full pipe.
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:
            child(script, arguments, out.fileno(), err.fileno())
        _, wait_status = os.waitpid(pid, 0)
        out.seek(0)
        err.seek(0)
        return {
            "status": os.waitstatus_to_exitcode(wait_status),
            "stdout": out.read().decode(),
            "stderr": err.read().decode(),
        }


if __name__ == "__main__":
    commands = json.load(sys.stdin)
    print(json.dumps([run(script, arguments) for script, arguments in commands]))
