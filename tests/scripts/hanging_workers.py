"""A torchrun job that never ends: each worker reports its pid, then waits forever.

torchrun --standalone --nproc_per_node=2 hanging_workers.py
"""

import os
import threading

print(f"worker {os.environ['LOCAL_RANK']} pid {os.getpid()}", flush=True)
threading.Event().wait()
