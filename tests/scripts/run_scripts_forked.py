"""Run many `python SCRIPT ARGS...` commands fast, each as the interpreter would run it.

Reads a JSON list of [script, [arguments...]] on stdin and prints a JSON list of
{"status", "stdout", "stderr"}, one per command. Importing torch takes ~2.5 s, and every
lesson script imports it first: this process imports it once, then forks one child per
command. The child sets sys.argv and sys.path[0] as `python SCRIPT` does (and keeps
this process's working folder), runs the script as __main__, and exits with the status
the interpreter would give (SystemExit's code, or 1 after printing the traceback of any
other exception).

Only torch is imported before the fork (no course module), so nothing of one script
can leak into another. Run it from a temporary folder: scripts may write files there.
"""

import json
import os
import runpy
import sys
import tempfile
import traceback

# The imports this process exists to share (torch._dynamo: PyTorch imports it at the
# first optimizer or DDP built, about 2 s).
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
