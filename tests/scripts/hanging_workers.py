"""A torchrun job whose workers report their pid, then wait forever."""

import os
import sys
import threading

# One write per line: print() may write the text and the newline separately (Python
# 3.13 does), and the two workers' lines then interleave on torchrun's shared output.
sys.stdout.write(f"worker {os.environ['LOCAL_RANK']} pid {os.getpid()}\n")
sys.stdout.flush()
threading.Event().wait()
