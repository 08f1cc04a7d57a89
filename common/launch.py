"""Run commands from a notebook cell, the way a learner would type them in a terminal.

Introduced in 00_intro; every lesson notebook launches its scripts with `run`.

Why not `!torchrun ...`? IPython ignores the exit status of `!` commands, so a script
that crashes would leave a green cell and a notebook that "passes". `run`:

- shows the command as typed and streams its output live into the cell;
- raises `CommandFailed` when the command exits non-zero (the cell fails, and so does
  nbmake in CI), and `CommandTimedOut` when it runs past its time limit;
- on a time-out or an interrupt (the stop button) kills every process the command
  started, torchrun's workers included, and after the command ends kills anything
  it left running, so no orphan is left holding a port or a core;
- returns the captured output for later cells to parse, as plain text: commands start
  without the colours a Jupyter kernel asks for, and escape codes are removed
  (`common.output`);
- runs `torchrun` and `python` from the same Python environment as the notebook's
  kernel, and replaces `{port}` in the command with a free TCP port (`common.ports`);
- gives torchrun `OMP_NUM_THREADS=1` (it would set it anyway, with a warning), and
  when all its agents are on this machine (`--standalone`, or a rendezvous at
  127.0.0.1) the address 127.0.0.1 (`PET_LOCAL_ADDR`), so that a launch on one
  machine never depends on the machine's name resolving;
- never moves one launch to another device: a notebook decides once, for all its
  launches (`common.notebook_device`), and a launch that starts more processes per
  machine than the notebook declared is refused.

For commands that run side by side (two torchrun agents playing two nodes, an agent
that joins a running job), `start` launches a command in the background and returns a
`Command`: `wait_for` a line of its output, then `wait` for it to end. A failure is done
to a job from outside, as the OOM killer would: `kill_worker(rank)` once its output
reaches a given step. While any wait
runs, the output of every running command is shown, each line prefixed by its label.
If a wait fails, times out or is interrupted, every running command is killed.

What a command prints is shown and kept by `common.output`: plain text, a whole line
at a time, whatever size the pieces arrive in.
"""

import atexit
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import psutil

from common import notebook_device
from common.command_line import on_this_machine_only, processes_per_machine, resolve
from common.output import LineStream, plain_text
from common.ports import free_port
from common.processes import ProcessTree, workers_of_rank


class CommandFailed(RuntimeError):
    """The command exited with a status other than the one expected. The message ends
    with the last lines the command printed, so that a log which shows only the error
    (nbmake's, CI's) still says why."""

    TAIL_LINES = 15

    def __init__(self, message: str, output: str):
        tail = output.rstrip("\n").splitlines()[-self.TAIL_LINES :]
        if tail:
            message += f"; its last {len(tail)} lines of output:\n" + "\n".join(tail)
        super().__init__(message)
        self.output = output


class CommandTimedOut(CommandFailed):
    """The command ran past its time limit and was killed."""


# Commands started and not yet ended; every wait shows their output.
_running: list["Command"] = []


class Command:
    """A command running in the background. Create it with `start`."""

    def __init__(self, command, cwd=None, env=None, label=None, quiet=False):
        if "{port}" in command:
            command = command.replace("{port}", str(free_port()))
        self.command, self.label, self.quiet = command, label, quiet
        self.prefix = f"[{label}] " if label else ""
        self._stream = LineStream(self.prefix, quiet)
        self.lines = self._stream.lines  # the lines so far, for `wait_for` and notebooks
        self.returncode: int | None = None
        self._log_dir: str | None = None  # torchrun's, below
        self._tree = ProcessTree()
        if not quiet:
            print(f"{self.prefix}$ {command}", flush=True)

        argv = resolve(shlex.split(command))
        child_env = {**plain_text(os.environ), "PYTHONUNBUFFERED": "1", **(env or {})}
        child_env.update(self._tree.environment())
        # One device for every launch of a notebook (common.notebook_device): none is
        # moved elsewhere on its own, and none starts more processes than declared.
        notebook_device.check_launch(processes_per_machine(command), command)
        if argv[1:3] == ["-m", "torch.distributed.run"]:
            # torchrun sets this to 1 for every worker anyway, with a four-line warning
            # each time; 00_intro explains the why once, so later lessons stay readable.
            child_env.setdefault("OMP_NUM_THREADS", "1")
            if on_this_machine_only(argv):
                # Each agent tells the workers to find its store at the machine's
                # name (socket.getfqdn()) unless given --local-addr; a name that does
                # not resolve makes them retry for minutes. Here every agent is on
                # this machine, where 127.0.0.1 always works: torchrun reads
                # --local-addr from PET_LOCAL_ADDR. An explicit --local-addr wins.
                child_env.setdefault("PET_LOCAL_ADDR", "127.0.0.1")
        if "torch.distributed.run" in " ".join(argv):  # also inside a wrapper (course.cluster)
            # torchrun keeps its workers' error files in a new folder of the system's
            # temporary folder, and leaves it there: one per launch, thousands per
            # suite run. Here (--log-dir, read from PET_LOG_DIR) the folder is this
            # command's own, removed when the command ends: its output says it all.
            self._log_dir = tempfile.mkdtemp(prefix="torchrun-logs-")
            child_env.setdefault("PET_LOG_DIR", self._log_dir)
        self._process = subprocess.Popen(
            argv,
            cwd=cwd,
            env=child_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # one stream, in the order things happened
            text=True,
            errors="replace",
            bufsize=1,
            start_new_session=True,  # the stop button's SIGINT is ours to handle
        )
        self._pending: queue.Queue = queue.Queue()
        self._ended = False
        threading.Thread(target=self._read, daemon=True).start()
        _running.append(self)

    @property
    def output(self) -> str:
        return self._stream.text

    def _read(self) -> None:
        for line in self._process.stdout:
            self._pending.put(line)
        self._pending.put(None)  # end of output: every process holding the pipe closed it

    def _pump(self) -> bool:
        """Show and keep the lines that have arrived; True if any did. Once the
        command has ended, end whatever it left running (an orphan may hold the
        pipe open), and take its exit status when its output is complete."""
        got = False
        if self._process.poll() is not None and self.returncode is None:
            self._tree.kill()
            self.returncode = self._process.returncode
            if self._log_dir:
                shutil.rmtree(self._log_dir, ignore_errors=True)
        while True:
            try:
                line = self._pending.get_nowait()
            except queue.Empty:
                return got
            if line is None:
                self._stream.end()
                self._ended = True
                return got
            got = True
            self._stream.add(line)

    @property
    def pid(self) -> int:
        """The command's own process id (for torchrun: its agent's)."""
        return self._process.pid

    def send_signal(self, signum: int) -> None:
        """Signal the command's own process (for torchrun: its agent), as a cluster's
        scheduler would when it asks a job to stop."""
        self._process.send_signal(signum)

    def worker(self, rank: int) -> psutil.Process:
        """torchrun's worker of global rank `rank` in this command."""
        workers = workers_of_rank(rank, self._tree.members())
        if len(workers) != 1:
            raise RuntimeError(f"`{self.command}` has {len(workers)} workers of rank {rank}")
        return workers[0]

    def kill_worker(self, rank: int) -> int:
        """SIGKILL torchrun's worker of global rank `rank`, as the OOM killer would (no
        handler runs), and return its pid."""
        worker = self.worker(rank)
        worker.send_signal(signal.SIGKILL)
        return worker.pid

    @property
    def done(self) -> bool:
        return self._ended and self.returncode is not None

    def kill(self) -> None:
        self._tree.kill()
        self._process.wait()
        self._pump()
        if self in _running:
            _running.remove(self)

    def wait_for(self, pattern: str, timeout: float) -> str:
        """Wait until a line of output matches the regular expression `pattern`, and
        return that line. Raises CommandFailed if the command ends first."""
        regex, seen = re.compile(pattern), 0

        def matched():
            nonlocal seen
            for line in self.lines[seen:]:
                if regex.search(line):
                    return line
            seen = len(self.lines)
            if self.done:
                raise CommandFailed(
                    f"`{self.command}` ended (status {self.returncode}) "
                    f"before printing a line matching {pattern!r}",
                    self.output,
                )
            return None

        what = f"`{self.command}` printed no line matching {pattern!r}"
        return _wait_until(matched, timeout, what, self)

    def wait(self, timeout: float, expect_failure: bool = False) -> str:
        """Wait for the command to end and return its output. Raises CommandFailed if
        it exits non-zero, or, with `expect_failure`, if it exits zero (and then kills
        every other running command, as any failed wait does)."""
        _wait_until(lambda: self.done or None, timeout, f"`{self.command}` did not end", self)
        if self in _running:
            _running.remove(self)
        if expect_failure and self.returncode == 0:
            message = f"`{self.command}` was expected to fail, but it exited with 0"
        elif not expect_failure and self.returncode != 0:
            message = f"`{self.command}` exited with status {self.returncode}"
        else:
            return self.output
        kill_all()
        raise CommandFailed(message, self.output)


def _wait_until(condition, timeout: float, what: str, waiting_on: Command):
    """Show the output of every running command until `condition()` returns something
    other than None. On a time-out, an error or an interrupt, kill them all."""
    deadline = time.monotonic() + timeout
    try:
        while True:
            shown = dict.fromkeys([*_running, waiting_on])  # in start order, no repeats
            arrived = [command._pump() for command in shown]
            result = condition()
            if result is not None:
                return result
            if time.monotonic() > deadline:
                output = "".join(command.output for command in _running)
                raise CommandTimedOut(
                    f"{what} within its time limit of {timeout:g} s; killed", output
                )
            if not any(arrived):
                time.sleep(0.05)  # nothing to show: don't spin
    except BaseException:  # our time-out, a failure, or the notebook's stop button
        kill_all()
        raise


def kill_all() -> None:
    """Kill every command still running."""
    for command in list(_running):
        command.kill()


atexit.register(kill_all)  # a kernel that shuts down takes its commands with it


def start(command: str, cwd=None, env=None, label: str | None = None, quiet=False) -> Command:
    """Start `command` in the background; `label` prefixes its lines of output."""
    return Command(command, cwd=cwd, env=env, label=label, quiet=quiet)


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
    `quiet` captures without printing (for tests, or cells that show a summary).
    """
    return start(command, cwd=cwd, env=env, quiet=quiet).wait(timeout, expect_failure)
