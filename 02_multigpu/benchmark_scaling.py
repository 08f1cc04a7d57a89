"""Lesson 02's benchmark: the speed-up of data parallel processes on this machine.

Runs `scaling.py` one configuration after another (never side by side) and prints a
table: the median time per epoch and the speed-up over one single-threaded process.

    python benchmark_scaling.py                       # 1 and 2 processes, 1 process x 2 threads
    python benchmark_scaling.py --processes 1 2 4 --samples 32768 --epochs 4
    python benchmark_scaling.py --batch_size 128     # all-reduce as costly as compute

On a machine with C cores the ideal speed-up of N <= C processes is N. Run it on a
quiet machine: anything else running takes cores away from the measurement. Where it
runs on GPUs (one per process), the 1-process x 2-threads row is left out: it compares
ways of using CPU cores.
"""

import re
import sys
from pathlib import Path

from common.cli import LessonArgumentParser
from common.launch import run
from common.notebook_device import choose

LAUNCH = "python benchmark_scaling.py [--processes 1 2 4] [--samples 32768] [--epochs 4]"
SCALING = Path(__file__).resolve().parent / "scaling.py"
SUMMARY = re.compile(
    r"summary \| processes (\d+) \| threads per process (\d+) .*\| median epoch ([\d.]+) s"
)


def measure(
    processes: int, threads: int, samples: int, epochs: int, width: int, batch_size: int
) -> float:
    """Median seconds per epoch of one scaling.py run (each configuration gets a run
    of its own, so that nothing of one carries over to the next)."""
    output = run(
        f"torchrun --standalone --nproc_per_node={processes} {SCALING} --threads {threads} "
        f"--samples {samples} --epochs {epochs} --width {width} --batch_size {batch_size}",
        timeout=1800,
        quiet=True,
    )
    return float(SUMMARY.search(output)[3])


def main() -> None:
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--threads", type=int, default=2, help="threads of the 1-process rival")
    parser.add_argument("--samples", type=int, default=32768)
    # On CPUs, gloo's all-reduce of the 4.3 MB of gradients runs on the same cores as
    # the compute. With 128 samples per step it costs as much as the step itself and 2
    # processes are no faster than 1 (measured: 1.05x); with 1024 the compute dwarfs it.
    parser.add_argument("--batch_size", type=int, default=1024, help="samples per step per process")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--width", type=int, default=1024)
    args = parser.parse_args()
    if min(args.processes) < 1 or min(args.threads, args.samples, args.batch_size) < 1:
        parser.error("processes, threads, samples and batch size must be >= 1")
    if args.epochs < 2:
        parser.error("epochs must be >= 2 (the first one pays for warming up)")

    # One device for every run compared here: never a GPU run beside a CPU run.
    device = choose(processes_per_machine=max(args.processes))
    rows = [(n, 1) for n in sorted(set(args.processes) | {1})]
    if device == "cpu":
        rows.append((1, args.threads))  # the rival that uses the cores without DDP
    baseline = None
    print(f"{'processes':>9} {'threads':>7} {'s/epoch':>8} {'speed-up':>8}")
    for processes, threads in rows:
        seconds = measure(
            processes, threads, args.samples, args.epochs, args.width, args.batch_size
        )
        baseline = baseline or seconds  # the first row: 1 process, 1 thread
        print(
            f"{processes:>9} {threads:>7} {seconds:>8.3f} {baseline / seconds:>7.2f}x", flush=True
        )


if __name__ == "__main__":
    sys.exit(main())
