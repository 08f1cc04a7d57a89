"""A torchrun job whose first attempt runs until a worker is killed from outside, and
whose restarted attempt ends at once.

torchrun --standalone --nproc_per_node=2 --max-restarts=1 until_killed.py

Each worker of the first attempt reports its pid, then waits forever; a restarted one
reports its attempt and pid and exits 0.
"""

import os
import sys
import threading

attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
# One write per line, so the workers' lines never interleave on torchrun's output.
sys.stdout.write(f"attempt {attempt} rank {os.environ['RANK']} pid {os.getpid()}\n")
sys.stdout.flush()
if attempt == 0:
    threading.Event().wait()
