"""Stopping when asked: preemptions and time limits, and errors no restart can fix.

Introduced in 03_fault_tolerance (part 3, `03_fault_tolerance_preemption.ipynb`); used
by 03_fault_tolerance and 04_multinode.

On a shared cluster a job is rarely killed outright. It is asked to stop: Slurm sends
SIGTERM when the time limit comes or a higher-priority job preempts it (or, with
`--signal=USR1@120`, a chosen signal two minutes early), and SIGKILL a grace period
later (`KillWait`, 30 s by default). Kubernetes does the same with its termination
grace period. torchrun forwards the signals named by `--signals-to-handle` (SIGTERM,
SIGINT, SIGHUP and SIGQUIT by default) to its workers, waits `--shutdown-timeout`
seconds, then kills them. SIGUSR1, not among them, kills torchrun itself when it
reaches it (its default action), and the workers never hear it.

This module gives a worker what it needs to stop well:

- `StopRequest`: a signal handler that only notes the signal. A handler runs between two
  bytecodes of the main thread, wherever training happens to be (in the middle of a
  step, of a save): doing real work there is unsafe. The training loop looks at the
  flag at a point of its choosing, and *all ranks agree* on it there with an
  all-reduce, in the lesson script, because the ranks receive the signal at different
  moments.
- `RESUMABLE_EXIT_CODE`: the code a worker exits with after such a stop, once the
  snapshot is on disk: "stopped, resume me", not 0 (the training is not finished, and
  a launcher must not report success) and not 1 (nothing failed).
- `stop_the_agent`: for an error that every restart would meet again (a snapshot that
  cannot be read, ranks that disagree on where to resume). torchrun restarts the group
  after any non-zero exit while it has restarts left; it has no notion of a permanent
  error. The worker asks its own agent to stop instead, as a preemption would.
"""

import os
import signal

import psutil

# sysexits.h's EX_TEMPFAIL: "a temporary failure; the user is invited to retry".
RESUMABLE_EXIT_CODE = 75

# What Slurm, Kubernetes and torchrun send to ask for a stop. SIGINT (Ctrl-C) is left to
# Python: a learner who presses Ctrl-C wants the program to stop at once.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class StopRequest:
    """Notes the first stop signal this process receives; `signal_name` says which."""

    def __init__(self, signals: tuple[signal.Signals, ...] = STOP_SIGNALS) -> None:
        self.signal_name: str | None = None
        for signum in signals:
            signal.signal(signum, self._note)

    def _note(self, signum: int, frame) -> None:
        # Only a note: the loop acts on it at the next step, on every rank at once.
        if self.signal_name is None:
            self.signal_name = signal.Signals(signum).name

    @property
    def received(self) -> bool:
        return self.signal_name is not None


def stop_the_agent() -> None:
    """Ask the torchrun agent that started this worker to stop, and not to restart.

    A worker started by torchrun is its agent's child (torchrun sets
    TORCHELASTIC_RUN_ID for it). SIGTERM makes the agent forward SIGTERM to its
    workers, wait for them, and exit non-zero, spending no restart. Every worker may
    call it: only LOCAL_RANK 0 sends the signal (one per agent; a second SIGTERM would
    cut the agent's wait for its workers short). Follow it with a barrier before any
    worker exits: the agent must hear it before it notices a worker gone, or it would
    start a restart first. An agent with no restarts to spend (`--max-restarts=0`, the
    default) is left alone: it stops anyway, and the signal would only add its
    SignalException traceback to the worker's one line.
    """
    if "TORCHELASTIC_RUN_ID" not in os.environ or os.environ.get("LOCAL_RANK", "0") != "0":
        return
    if int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0")) == 0:
        return
    agent = psutil.Process(os.getppid())
    # Only a torchrun agent (`torchrun` or `python -m torch.distributed.run`): never a
    # shell or a notebook that happens to have the variable set.
    if any(part.endswith(("torchrun", "torch.distributed.run")) for part in agent.cmdline()):
        agent.send_signal(signal.SIGTERM)
