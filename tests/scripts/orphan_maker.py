"""Starts a child in a session of its own (as torchrun does its workers) that only SIGKILL
ends (as a worker's stop handler, it goes on after SIGTERM); once its handler is in place,
reports both pids, then exits ("exit") or waits forever ("hang")."""

import os
import subprocess
import sys
import threading

CHILD = (
    "import signal, threading\n"
    "signal.signal(signal.SIGTERM, lambda signum, frame: None)\n"
    "print('handler in place', flush=True)\n"
    "threading.Event().wait()\n"
)
# Its stderr is ours, the command's output: it holds it open after we exit.
child = subprocess.Popen(
    [sys.executable, "-c", CHILD], start_new_session=True, stdout=subprocess.PIPE, text=True
)
assert child.stdout.readline() == "handler in place\n"
print(f"parent pid {os.getpid()}", flush=True)
print(f"child pid {child.pid}", flush=True)
if sys.argv[1] == "hang":
    threading.Event().wait()
