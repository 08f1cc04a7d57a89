"""Starts a child in a session of its own (as torchrun does with its workers), reports
both pids, then either exits at once ("exit") or waits forever ("hang")."""

import os
import subprocess
import sys
import threading

child = subprocess.Popen(
    [sys.executable, "-c", "import threading; threading.Event().wait()"],
    start_new_session=True,
)
print(f"parent pid {os.getpid()}", flush=True)
print(f"child pid {child.pid}", flush=True)
if sys.argv[1] == "hang":
    threading.Event().wait()
