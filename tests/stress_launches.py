"""Launch every DDP lesson script many times at its smallest settings and count failures.

Not a test that pytest runs: a measurement, for the claim "a finished run never fails"
(see `common.distributed.end_process` and lesson 02). Each round launches every script
once, under torchrun (and `multigpu.py`, which starts its processes with mp.spawn),
each in a fresh temporary folder; a launch fails when it exits non-zero or runs past
its time limit. It prints a table of failures per script and exits 1 if any launch
failed.

    .venv/bin/python tests/stress_launches.py --rounds 12       # 12 x 17 = 204 launches
    .venv/bin/python tests/stress_launches.py --rounds 3 --only multigpu exit_abort

Run it on a quiet machine: it prints the load average first.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
PYTHON = [sys.executable]

# (name, launcher, script, arguments): the smallest settings each script accepts.
LAUNCHES = [
    ("exit_abort", TORCHRUN, "02_multigpu/exit_abort.py", ["--end_process"]),
    ("ddp_replicas", TORCHRUN, "01_theory/ddp_replicas.py", ["--epochs", "1"]),
    ("ddp_buckets", TORCHRUN, "01_theory/ddp_buckets.py", ["--caps", "1", "--iterations", "2"]),
    ("collectives_tour", TORCHRUN, "01_theory/collectives_tour.py", []),
    ("multigpu", PYTHON, "02_multigpu/multigpu.py", ["1", "1", "--world_size", "2"]),
    ("scaling", TORCHRUN, "02_multigpu/scaling.py", ["--epochs", "2", "--samples", "512"]),
    ("checkpoint_barrier", TORCHRUN, "02_multigpu/checkpoint_barrier.py", []),
    ("grad_accumulation", TORCHRUN, "02_multigpu/grad_accumulation.py", ["--steps", "2"]),
    ("model_parallel", TORCHRUN, "02_multigpu/model_parallel.py", ["--steps", "2"]),
    ("sync_batchnorm", TORCHRUN, "02_multigpu/sync_batchnorm.py", ["--steps", "2"]),
    ("uneven_inputs", TORCHRUN, "02_multigpu/uneven_inputs.py", ["--join", "--batches", "1"]),
    ("multigpu_torchrun", TORCHRUN, "03_fault_tolerance/multigpu_torchrun.py", ["1", "1"]),
    ("multinode", TORCHRUN, "04_multinode/multinode.py", ["1", "1"]),
    ("node_report", TORCHRUN, "04_multinode/node_report.py", []),
    (
        "mingpt_main",
        TORCHRUN,
        "05_mingpt/main.py",
        [
            "trainer.max_steps=4",
            "optimizer.warmup_steps=1",
            "trainer.sample_chars=0",
            "model.n_layer=1",
            "trainer.eval_every=2",
        ],
    ),
    ("fsdp_shards", TORCHRUN, "05_mingpt/fsdp_shards.py", ["--n-layer", "1", "--steps", "2"]),
    ("hello_torchrun", TORCHRUN, "00_intro/hello_torchrun.py", []),
]


def launch(launcher: list[str], script: str, arguments: list[str], time_limit: float):
    """(failed, last lines of output) of one launch in a folder of its own."""
    with tempfile.TemporaryDirectory(prefix="stress-") as folder:
        environment = {**os.environ, "OMP_NUM_THREADS": "1"}
        try:
            done = subprocess.run(
                [*launcher, str(REPO / script), *arguments],
                cwd=folder,
                env=environment,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=time_limit,
            )
        except subprocess.TimeoutExpired as expired:
            output = expired.output.decode() if isinstance(expired.output, bytes) else ""
            return True, f"timed out after {time_limit:g} s\n{output}"
        return done.returncode != 0, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12, help="launches of each script")
    parser.add_argument("--only", nargs="+", help="names of the launches to run")
    parser.add_argument("--time_limit", type=float, default=180, help="seconds per launch")
    args = parser.parse_args()
    chosen = [entry for entry in LAUNCHES if not args.only or entry[0] in args.only]
    if not chosen:
        sys.exit(f"--only names none of: {', '.join(entry[0] for entry in LAUNCHES)}")

    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores", flush=True)
    failures = {name: 0 for name, *_ in chosen}
    aborts = 0
    started = time.monotonic()
    for round_number in range(1, args.rounds + 1):
        for name, launcher, script, arguments in chosen:
            failed, output = launch(launcher, script, arguments, args.time_limit)
            if failed:
                failures[name] += 1
                aborts += "terminate called" in output
                tail = "\n".join(output.rstrip().splitlines()[-8:])
                print(f"round {round_number}: {name} FAILED\n{tail}", flush=True)
        print(f"round {round_number} of {args.rounds} done", flush=True)

    launches = args.rounds * len(chosen)
    print(f"\n{'script':<20} failed of {args.rounds}")
    for name, count in failures.items():
        print(f"{name:<20} {count}")
    total = sum(failures.values())
    print(
        f"\n{total} failed, {launches - total} passed of {launches} launches "
        f"({aborts} with 'terminate called'), {time.monotonic() - started:.0f} s"
    )
    sys.exit(1 if total else 0)


if __name__ == "__main__":
    main()
