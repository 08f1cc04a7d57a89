"""`python die_mid_snapshot.py SNAPSHOT_PATH`: save_atomic a large snapshot, and SIGKILL
itself (no clean-up of any kind) once 1 MB of it is written."""

import io
import os
import signal
import sys

import torch

from common import snapshot


class DiesMidWrite(io.FileIO):  # unbuffered: what it wrote is in the file
    def write(self, data):
        if self.tell() + len(data) > 1_000_000:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().write(data)


snapshot.open = DiesMidWrite  # save_atomic's open(temporary, "xb")
state = {"model": {"weight": torch.zeros(10_000_000)}, "epochs_run": 2}
snapshot.save_atomic(state, sys.argv[1])
