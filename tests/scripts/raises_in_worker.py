"""A worker that fails with an ordinary exception, with or without @record (`--record`):
for the test of what torchrun's failure report then shows."""

import sys

from torch.distributed.elastic.multiprocessing.errors import record


def main() -> None:
    raise ValueError("the worker's own error")


if __name__ == "__main__":
    (record(main) if "--record" in sys.argv else main)()
