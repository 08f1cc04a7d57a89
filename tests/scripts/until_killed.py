"""A torchrun job whose workers, in every attempt, report their attempt, rank and pid,
then wait until they are killed from outside.

torchrun --standalone --nproc_per_node=2 --max-restarts=1 until_killed.py
"""

import os
import sys
import threading

attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
# One write per line, so the workers' lines never interleave on torchrun's output.
sys.stdout.write(f"attempt {attempt} rank {os.environ['RANK']} pid {os.getpid()}\n")
sys.stdout.flush()
threading.Event().wait()
