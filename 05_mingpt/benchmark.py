"""Lesson 05: measure the lesson's targets (reported, never asserted).

    python benchmark.py throughput    # 1 single-threaded process vs 2 DDP processes
    python benchmark.py throughput --batch_size 32 --repeats 1   # the classroom batch
    python benchmark.py classroom     # 3 minutes of the classroom run: validation < 2.0?
    python benchmark.py split         # one global batch as 1 x 4 and as 4 x 1: same weights?
    python benchmark.py compile       # trainer.compile=true against false: does it pay here?

`throughput` runs main.py with the same settings (the lesson's model in float32, whose
matrix products a GPU computes in TF32, as the trainer sets it: precision.py; no
validation in between; a batch of `--batch_size` sequences per process) once with 1
process and once with 2, each process using one thread, and compares their tokens
per second; it alternates the two `--repeats` times and prints every ratio
and the median. `classroom` runs the notebook's classroom settings for
`--epochs` epochs (about 3 minutes on 2 cores) and prints the validation loss
reached after 1, 2 and 3 minutes of training. `split` trains 10 steps of a global
batch of 128 as 1 process x 4 micro-batches and as 4 processes x 1, and prints how
far apart the weights end. `compile` trains `--steps` steps of the classroom run
with and without `trainer.compile`, and prints the steady tokens/s and the whole
run's time (compilation included). All work in a temporary folder and print one line per
result. Run them on a quiet machine: other jobs on the same cores change the numbers.
"""

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from config import load_config

from common.cli import LessonArgumentParser, positive_int
from common.launch import run
from common.notebook_device import choose

LAUNCH = "python benchmark.py throughput"

HERE = Path(__file__).resolve().parent
MAIN = HERE / "main.py"
CLASSROOM = "trainer.amp=fp32 trainer.eval_every=25"

# Why these settings. A first measurement with the classroom's 32 sequences per step,
# 60 steps all timed, gave 1.41x (12,113 vs 17,100 tokens/s). Where the time goes,
# measured on this 2-core machine in CPU time per step (which other programs on the
# machine disturb far less than wall time):
# - the all-reduce itself is cheap for this model: 0.83 M parameters, 3.3 MB of
#   gradients, cost each process about 1% of a 0.19 s step (steps with and without
#   `no_sync()`, interleaved in one run). Lesson 02's problem, gloo's all-reduce as
#   costly as the compute on the same cores, is far smaller here;
# - two processes side by side slow each other by about 5% (shared caches, memory);
# - the rest is waiting, and it comes from outside: the processes meet at every
#   step's all-reduce, so whatever takes a core from one of them stalls both. One
#   other busy program leaves a single process its core but costs 2 processes much
#   more, so on a machine that is not quiet the ratio drops first. The same command
#   gave 1.80x and 1.86x when the machine was calmer; the load average printed
#   first tells whether it was quiet.
# Hence:
# - 128 sequences of 64 characters per process and step (8,192 tokens per process,
#   16,384 per step for two: the order of what small character-level GPTs train
#   with). Longer steps let delays of the two processes even out within a step:
#   on the same calm machine, minutes apart, six pairs of runs with 128 gave 1.80x
#   to 2.21x (median 1.91x), three with 32 gave 1.60x to 2.01x (median 1.88x). A
#   bigger batch costs no more per token on one core (about 12,000 tokens/s of CPU
#   time at 32 and at 128); under heavy load both fall to 1.1x-1.4x. It is
#   per process and equal on both sides, as in any DDP job: 2 processes take twice
#   the tokens per step. No gradient accumulation: each step is one batch.
# - float32 on both sides, as in the notebook's classroom run. Whether bf16 autocast
#   is faster or slower than float32 depends on the CPU's bf16 instructions (the
#   notebook times both on the learner's machine); where it is slower, the slower
#   compute would flatter the ratio while lowering both numbers.
# - one thread per process on both sides (OMP_NUM_THREADS=1): one process with two
#   threads would use both cores, two processes with two threads each would fight
#   over them. (Lesson 02 also compares 1 process x 2 threads.)
# - timed: training steps only. Validation is off until the run ends (the end-of-
#   epoch validation and snapshot are outside main.py's clock), no sample, and the
#   first `WARMUP_STEPS` steps (allocations, DDP rebuilding its buckets after the
#   first step) are left out of both runs, by reading the metrics file.
# - the runs alternate 1, 2, 1, 2, ... so that a change of the machine's load hits
#   both; the median ratio is the result.
WARMUP_STEPS = 5
SETTINGS = (
    "trainer.amp=fp32 trainer.eval_every=100000 trainer.sample_chars=0 "
    f"trainer.max_epochs=1000 trainer.log_every={WARMUP_STEPS}"
)


def tokens_per_second(nproc: int, steps: int, batch_size: int, block_size: int) -> float:
    """Steady-state tokens per second of one main.py run, from its metrics file:
    between the progress record after the warm-up and the last one."""
    with tempfile.TemporaryDirectory() as folder:
        run(
            f"torchrun --standalone --nproc_per_node={nproc} {MAIN} {SETTINGS} "
            f"trainer.max_steps={steps} trainer.batch_size={batch_size} "
            f"trainer.global_batch_size={batch_size * nproc} optimizer.warmup_steps=1",
            cwd=folder,
            timeout=60 * 30,
            quiet=True,
            env={"OMP_NUM_THREADS": "1"},
        )
        lines = Path(folder, "metrics.jsonl").read_text().splitlines()
    train = [r for r in map(json.loads, lines) if r["kind"] == "train"]
    first, last = train[0], train[-1]
    tokens = (last["step"] - first["step"]) * batch_size * nproc * block_size
    seconds = last["seconds"] - first["seconds"]
    print(
        f"{nproc} process(es), 1 thread each: {tokens / seconds:,.0f} tokens/s "
        f"(steps {first['step']}-{last['step']} in {seconds:.1f} s)",
        flush=True,
    )
    return tokens / seconds


def throughput(steps: int, batch_size: int, repeats: int, device: str) -> None:
    block_size = load_config(HERE / "train_cfg.yaml", []).data.block_size
    # trainer.amp=fp32 is float32, but on a GPU the trainer lets matrix products use TF32.
    precision = "float32 (TF32 matrix products)" if device == "cuda" else "float32"
    print(
        f"{steps} steps of {batch_size} sequences of {block_size} characters per process, "
        f"on {device}, {precision}; the first {WARMUP_STEPS} steps not counted",
        flush=True,
    )
    print(
        f"load average of the last minute: {os.getloadavg()[0]:.2f} (near 0 on a quiet "
        "machine; other programs lower the 2-process number first)",
        flush=True,
    )
    ratios = []
    for _ in range(repeats):
        one, two = (tokens_per_second(n, steps, batch_size, block_size) for n in (1, 2))
        ratios.append(two / one)
        print(f"speed-up of 2 DDP processes over 1: {ratios[-1]:.2f}x", flush=True)
    print(
        f"speed-up, median of {repeats}: {statistics.median(ratios):.2f}x "
        f"({', '.join(f'{r:.2f}x' for r in ratios)}; target >= 1.6x)"
    )


def classroom(epochs: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        run(
            f"torchrun --standalone --nproc_per_node=2 {MAIN} {CLASSROOM} "
            f"trainer.max_epochs={epochs}",
            cwd=folder,
            timeout=60 * 30,
            quiet=True,
        )
        lines = Path(folder, "metrics.jsonl").read_text().splitlines()
    val = [r for r in map(json.loads, lines) if r["kind"] == "val"]
    print(f"validation loss at the start: {val[0]['loss']:.3f} ({epochs} epochs, {CLASSROOM})")
    for minutes in (1, 2, 3):
        reached = [r for r in val if r["seconds"] <= 60 * minutes]
        last = reached[-1]
        print(
            f"after {minutes} min of training: {last['loss']:.3f} (step {last['step']}, "
            f"{last['seconds']:.0f} s)"
        )
    below = next((r for r in val if r["loss"] < 2.0), None)
    if below is None:
        print("validation loss never went below 2.0 (target: within 180 s of training)")
    else:
        print(
            f"validation loss first below 2.0 ({below['loss']:.3f}) after "
            f"{below['seconds']:.0f} s of training, step {below['step']} (target: within 180 s)"
        )


def split() -> None:
    """The same 10 steps of a global batch of 128 as 1 x 4 and as 4 x 1."""
    weights = {}
    for nproc, micro_batches in ((1, 4), (4, 1)):
        with tempfile.TemporaryDirectory() as folder:
            run(
                f"torchrun --standalone --nproc_per_node={nproc} {MAIN} trainer.amp=fp32 "
                "trainer.global_batch_size=128 trainer.batch_size=32 trainer.max_steps=10 "
                "optimizer.warmup_steps=5 trainer.sample_chars=0 trainer.log_every=10",
                cwd=folder,
                timeout=60 * 30,
                quiet=True,
                env={"OMP_NUM_THREADS": "1"},
            )
            weights[nproc] = torch.load(Path(folder, "snapshot.pt"), map_location="cpu")["model"]
        print(f"{nproc} process(es) x {micro_batches} micro-batch(es) of 32: trained", flush=True)
    largest = max((weights[1][k] - weights[4][k]).abs().max().item() for k in weights[1])
    print(f"after 10 steps, the largest difference between the two runs' weights: {largest:.2e}")


def compile_cost(steps: int) -> None:
    """The classroom run's first `steps` steps, compiled and not."""
    for compiled in ("false", "true"):
        with tempfile.TemporaryDirectory() as folder:
            started = time.perf_counter()
            run(
                f"torchrun --standalone --nproc_per_node=2 {MAIN} {SETTINGS} "
                f"trainer.max_steps={steps} trainer.compile={compiled} optimizer.warmup_steps=1",
                cwd=folder,
                timeout=60 * 30,
                quiet=True,
            )
            wall = time.perf_counter() - started
            lines = Path(folder, "metrics.jsonl").read_text().splitlines()
        train = [r for r in map(json.loads, lines) if r["kind"] == "train"][1:]
        steady = statistics.median(r["tokens_per_second"] for r in train)
        print(
            f"trainer.compile={compiled}: {steady:,.0f} tokens/s after the first "
            f"{WARMUP_STEPS} steps (median), {wall:.0f} s for the whole run of {steps} steps",
            flush=True,
        )


def main() -> int:
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument("what", choices=["throughput", "classroom", "split", "compile"])
    parser.add_argument("--epochs", type=positive_int, default=14, help="classroom epochs")
    parser.add_argument("--steps", type=positive_int, default=40, help="steps per run")
    parser.add_argument(
        "--batch_size", type=positive_int, default=128, help="sequences per process and step"
    )
    parser.add_argument("--repeats", type=positive_int, default=3, help="pairs of runs")
    args = parser.parse_args()
    # One device for every run compared here (split starts 4 processes, the others 2).
    device = choose(processes_per_machine=4 if args.what == "split" else 2)
    if args.what == "classroom":
        classroom(args.epochs)
    elif args.what == "split":
        split()
    elif args.what == "compile":
        compile_cost(max(args.steps, 4 * WARMUP_STEPS))
    elif args.steps <= WARMUP_STEPS:
        parser.error(f"--steps must be more than the {WARMUP_STEPS} warm-up steps")
    else:
        throughput(args.steps, args.batch_size, args.repeats, device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
