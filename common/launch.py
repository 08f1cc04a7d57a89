"""Run a command from a notebook cell, the way a learner would type it in a terminal.

Introduced in 00_intro; every lesson notebook launches its scripts with `run`.

Why not `!torchrun ...`? IPython ignores the exit status of `!` commands, so a script
that crashes would leave a green cell and a notebook that "passes". `run`:

- shows the command as typed and streams its output live into the cell;
- raises `CommandFailed` when the command exits non-zero (the cell fails, and so does
  nbmake in CI), and `CommandTimedOut` when it runs past its time limit;
- on a time-out or an interrupt (the stop button) kills every process the command
  started, torchrun's workers included, and after the command ends kills anything
  it left running, so no orphan is left holding a port or a core;
- returns the captured output for later cells to parse;
- runs `torchrun` and `python` from the same Python environment as the notebook's
  kernel, and replaces `{port}` in the command with a free TCP port.
"""

import os
import queue
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import psutil

# Seconds between SIGTERM (torchrun forwards it to its workers and cleans up) and
# SIGKILL for whatever is still alive.
GRACE_SECONDS = 5.0
# Every process a command starts inherits this variable, with a value of its own.
MARKER_VARIABLE = "COURSE_LAUNCH_ID"


class CommandFailed(RuntimeError):
    """The command exited with a status other than the one expected."""

    def __init__(self, message: str, output: str):
        super().__init__(message)
        self.output = output


class CommandTimedOut(CommandFailed):
    """The command ran past its time limit and was killed."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing is listening on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def resolve(argv: list[str]) -> list[str]:
    """Point `torchrun` and `python` at the interpreter running this code, so that a
    notebook never picks up another environment's torch from the PATH."""
    if argv and argv[0] == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", *argv[1:]]
    if argv and argv[0] in ("python", "python3"):
        return [sys.executable, *argv[1:]]
    return argv


def run(
    command: str,
    timeout: float = 180,
    cwd: str | os.PathLike | None = None,
    env: dict[str, str] | None = None,
    expect_failure: bool = False,
    quiet: bool = False,
) -> str:
    """Run `command`, stream its output, and return the output as one string.

    Raises CommandFailed if it exits non-zero, or, with `expect_failure=True`, if it
    exits zero: a cell that shows a failure must fail when the failure goes away.
    Raises CommandTimedOut after `timeout` seconds. `env` adds to the environment.
    `quiet` captures without printing (for helpers that show a summary instead).
    """
    if "{port}" in command:
        command = command.replace("{port}", str(free_port()))
    if not quiet:
        print(f"$ {command}", flush=True)
    argv = resolve(shlex.split(command))

    tree = ProcessTree()
    child_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {}), **tree.environment()}
    if argv[1:3] == ["-m", "torch.distributed.run"]:
        # torchrun sets this to 1 for every worker anyway, with a four-line warning
        # each time; 00_intro explains the why once, so later lessons stay readable.
        child_env.setdefault("OMP_NUM_THREADS", "1")

    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env=child_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream, in the order things happened
        text=True,
        errors="replace",
        bufsize=1,
        start_new_session=True,  # keep the stop button's SIGINT for us to handle
    )
    lines: list[str] = []
    try:
        returncode = _stream(process, tree, lines, time.monotonic() + timeout, quiet)
    except _Deadline:
        tree.kill()
        process.wait()
        raise CommandTimedOut(
            f"`{command}` ran past its time limit of {timeout:g} s and was killed", "".join(lines)
        ) from None
    except BaseException:  # the notebook's stop button (KeyboardInterrupt), or worse
        tree.kill()
        process.wait()
        raise
    output = "".join(lines)
    if expect_failure and returncode == 0:
        raise CommandFailed(f"`{command}` was expected to fail, but it exited with 0", output)
    if not expect_failure and returncode != 0:
        raise CommandFailed(f"`{command}` exited with status {returncode}", output)
    return output


class _Deadline(Exception):
    """The command's time is up."""


class ProcessTree:
    """A command and every process it started, however deep.

    torchrun starts each worker in a session of its own, and a worker whose launcher
    died is adopted by init, so neither the process group nor the parent-child tree
    finds them all. The environment does: every process inherits a marker variable
    whose value is unique to this command.
    """

    def __init__(self):
        self.marker = uuid.uuid4().hex

    def environment(self) -> dict[str, str]:
        return {MARKER_VARIABLE: self.marker}

    def members(self) -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter():
            try:
                if proc.environ().get(MARKER_VARIABLE) == self.marker:
                    found.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass  # gone, not ours, or already dead
        return found

    def kill(self) -> None:
        """SIGTERM every member (torchrun then stops its workers cleanly), wait a
        little, then SIGKILL whatever is still alive."""
        alive = self.members()
        for signum in (signal.SIGTERM, signal.SIGKILL):
            for proc in alive:
                try:
                    proc.send_signal(signum)
                except psutil.NoSuchProcess:
                    pass
            _, alive = psutil.wait_procs(alive, timeout=GRACE_SECONDS)
            if not alive:
                return


def _read_lines(stream, pending: queue.Queue) -> None:
    for line in stream:
        pending.put(line)
    pending.put(None)  # end of output: every process holding the pipe has closed it


def _stream(
    process: subprocess.Popen, tree: ProcessTree, lines: list[str], deadline: float, quiet: bool
) -> int:
    """Copy the command's output to ours line by line until it ends, and return its
    exit status. Raises _Deadline when time runs out first."""
    pending: queue.Queue = queue.Queue()
    threading.Thread(target=_read_lines, args=(process.stdout, pending), daemon=True).start()
    leftovers_killed = False
    while True:
        if not leftovers_killed and process.poll() is not None:
            # The command has ended. Whatever it started that still runs is an
            # orphan, and may hold the pipe open: end it, then read what is left.
            tree.kill()
            leftovers_killed = True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _Deadline
        try:
            line = pending.get(timeout=min(remaining, 0.2))
        except queue.Empty:
            continue
        if line is None:
            break
        lines.append(line)
        if not quiet:
            sys.stdout.write(line)
            sys.stdout.flush()
    try:
        returncode = process.wait(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        raise _Deadline from None
    if not leftovers_killed:
        tree.kill()
    return returncode
