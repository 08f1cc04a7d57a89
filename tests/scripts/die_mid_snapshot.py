"""Saves a large snapshot with common.snapshot.save_atomic and kills itself with
SIGKILL (no clean-up of any kind) once 1 MB of it has been written.

    python die_mid_snapshot.py SNAPSHOT_PATH
"""

import builtins
import os
import signal
import sys

import torch

from common import snapshot


class DiesMidWrite:
    """A file that SIGKILLs its process part-way through being written."""

    def __init__(self, file):
        self.file, self.written = file, 0

    def write(self, data):
        self.written += len(data)
        if self.written > 1_000_000:
            self.file.flush()  # what was written so far is really in the file
            os.kill(os.getpid(), signal.SIGKILL)
        return self.file.write(data)

    def __getattr__(self, name):
        return getattr(self.file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()


snapshot.open = lambda *args, **kwargs: DiesMidWrite(builtins.open(*args, **kwargs))
state = {"model": {"weight": torch.zeros(10_000_000)}, "epochs_run": 2}
snapshot.save_atomic(state, sys.argv[1])
