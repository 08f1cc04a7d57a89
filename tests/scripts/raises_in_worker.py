"""A worker that fails with an ordinary exception, with or without @record (`--record`):
for the test of what torchrun's failure report then shows. It first prints the address
torchrun gave it for the store."""

import os
import sys

from torch.distributed.elastic.multiprocessing.errors import record


def main() -> None:
    print("MASTER_ADDR", os.environ["MASTER_ADDR"], flush=True)
    raise ValueError("the worker's own error")


if __name__ == "__main__":
    (record(main) if "--record" in sys.argv else main)()
