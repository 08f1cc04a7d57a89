"""A worker that fails with an ordinary exception, without @record: for the test of what
torchrun's failure report then shows. It first prints where torchrun told it to write
its error file (every worker gets one, in torchrun's log folder)."""

import os


def main() -> None:
    print("TORCHELASTIC_ERROR_FILE", os.environ["TORCHELASTIC_ERROR_FILE"], flush=True)
    raise ValueError("the worker's own error")


if __name__ == "__main__":
    main()
