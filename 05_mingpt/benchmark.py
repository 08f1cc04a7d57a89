"""Lesson 05: measure the lesson's two speed targets (reported, never asserted).

    python benchmark.py throughput    # 1 single-threaded process vs 2 DDP processes
    python benchmark.py classroom     # the notebook's run: when does validation < 2.0?

`throughput` runs main.py for the same number of steps (default config, float32, no
validation in between) once with 1 process and once with 2, each process using one
thread, and compares the tokens per second that main.py reports. `classroom` runs
the notebook's classroom command and reads its metrics file. Both work in a
temporary folder and print one line per result. Run them on a quiet machine: other
jobs on the same cores change the numbers.
"""

import json
import re
import sys
import tempfile
from pathlib import Path

from common.cli import LessonArgumentParser
from common.launch import run

HERE = Path(__file__).resolve().parent
MAIN = HERE / "main.py"
CLASSROOM = "trainer.mixed_precision=false trainer.eval_every=50"
TRAINED = re.compile(r"trained (\d+) steps in ([\d.]+) s: ([\d,]+) tokens/s")


def throughput(steps: int) -> None:
    results = {}
    for nproc in (1, 2):
        with tempfile.TemporaryDirectory() as folder:
            output = run(
                f"torchrun --standalone --nproc_per_node={nproc} {MAIN} trainer.max_steps={steps} "
                "trainer.mixed_precision=false trainer.eval_every=100000 trainer.sample_chars=0 "
                f"trainer.log_every={steps}",
                cwd=folder,
                timeout=60 * 30,
                quiet=True,
                env={"OMP_NUM_THREADS": "1"},
            )
        _, seconds, tokens_per_second = TRAINED.search(output).groups()
        results[nproc] = float(tokens_per_second.replace(",", ""))
        print(
            f"{nproc} process(es), 1 thread each: {results[nproc]:,.0f} tokens/s "
            f"({steps} steps in {seconds} s)",
            flush=True,
        )
    print(f"speed-up of 2 DDP processes over 1: {results[2] / results[1]:.2f}x (target >= 1.6x)")


def classroom() -> None:
    with tempfile.TemporaryDirectory() as folder:
        run(
            f"torchrun --standalone --nproc_per_node=2 {MAIN} {CLASSROOM}",
            cwd=folder,
            timeout=60 * 30,
            quiet=True,
        )
        lines = Path(folder, "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    val = [r for r in records if r["kind"] == "val"]
    below = next((r for r in val if r["loss"] < 2.0), None)
    print(
        f"validation loss: {val[0]['loss']:.3f} at the start, {val[-1]['loss']:.3f} after "
        f"{val[-1]['seconds']:.0f} s of training ({val[-1]['step']} steps)"
    )
    if below is None:
        print("validation loss never went below 2.0 (target: within 180 s of training)")
    else:
        print(
            f"validation loss first below 2.0 ({below['loss']:.3f}) after "
            f"{below['seconds']:.0f} s of training, step {below['step']} (target: within 180 s)"
        )


def main() -> int:
    parser = LessonArgumentParser(
        description=__doc__.splitlines()[0], launch_hint="python benchmark.py throughput"
    )
    parser.add_argument("what", choices=["throughput", "classroom"])
    parser.add_argument("--steps", type=int, default=60, help="steps per throughput run")
    args = parser.parse_args()
    throughput(args.steps) if args.what == "throughput" else classroom()
    return 0


if __name__ == "__main__":
    sys.exit(main())
