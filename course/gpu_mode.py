"""The GPU mode: the course on this machine's CUDA GPUs, in one command that ends with
a table of what ran, on which device, and how it ended.

    python -m course.gpu_mode                       # tests, every script, every notebook
    python -m course.gpu_mode --parts scripts --logs gpu-logs

Three parts, run in turn, so that a GPU never has two jobs at once (two would share its
memory, nccl's 3 and 10 s timeouts would time out waiting for the other, and a GPU in
exclusive-process mode refuses a second):
- tests: tests/test_gpu_mode.py and tests/test_common_distributed_gpus.py with
  COURSE_TEST_DEVICE=cuda, what the lessons claim, asserted on the GPUs (one process per
  GPU, at most 4);
- scripts: every lesson script (course.launches) with DDP_DEVICE=cuda, one process per
  GPU (at most 4), one launch at a time, each of which must exit 0;
- notebooks: every lesson notebook under nbmake, each on the device its first cell
  chooses (common.notebook_device: its GPUs where there are as many as it declares,
  else the CPU, and it says so): those on the GPUs one at a time, then those on the CPU
  side by side.

A row ends `passed`, `FAILED`, `needs N GPUs` (a test or script that needs more processes
than this machine has GPUs: counted and listed, never run on the CPU instead) or `needs
PyTorch X` (a script or cell that said so in one line, common.versions). It exits 1 if a
row failed. `--device cpu` runs the same on the CPU with 2 processes (the suite tests the
mode that way; the CPU suite itself is `python -m pytest`).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections import Counter
from pathlib import Path

from common.notebook_device import where
from common.versions import NEEDS
from course import results
from course.launches import LAUNCHES, Launch, run_once
from course.lessons import REPO, declaration, lesson_notebooks

TESTS = ["tests/test_gpu_mode.py", "tests/test_common_distributed_gpus.py"]
PARTS = ("tests", "scripts", "notebooks")
MOST_PROCESSES = 4  # one per GPU, at most 4: the lessons' largest worlds
SCRIPT_TIME_LIMIT = 300  # seconds per script launch
NEEDS_VERSION = re.compile(rf"{NEEDS} (\d+\.\d+) or newer")


def outcome(failed: bool, output: str) -> str:
    """`passed`, `needs PyTorch X` (the run said so) or `FAILED`."""
    if not failed:
        return "passed"
    newer = NEEDS_VERSION.search(output)
    return f"needs PyTorch {newer[1]}" if newer else "FAILED"


def plan_scripts(device: str, gpus: int) -> list[tuple[Launch, int | None]]:
    """Each launch with its process count (one per GPU, at most 4, on CUDA; 2 on the
    CPU), or None where it needs more GPUs than here."""
    processes = min(gpus, MOST_PROCESSES) if device == "cuda" else 2
    planned = []
    for launch in LAUNCHES:
        if launch.launcher == "python":  # one process, no process group
            planned.append((launch, 1))
        else:
            planned.append((launch, processes if processes >= launch.fewest else None))
    return planned


def run_script(launch: Launch, processes: int, device: str, log) -> tuple[str, float]:
    """(outcome, seconds) of one launch on `device`, in a folder of its own."""
    started = time.monotonic()
    command = launch.command(processes, REPO)
    ending, output = run_once(command, SCRIPT_TIME_LIMIT, DDP_DEVICE=device)
    seconds = time.monotonic() - started
    title = f"===== {launch.name} x{processes} on {device}: {ending}, {seconds:.0f} s"
    log.write(f"{title}\n{output}\n")
    log.flush()
    return outcome(ending != "exit 0", output), seconds


def pytest_command(paths: list[str], report: Path, workers: int, extra: list[str]) -> list[str]:
    options = ["-p", "no:cacheprovider", "-rfEs", f"--junitxml={report}", "-n", str(workers)]
    return [sys.executable, "-m", "pytest", *paths, *options, *extra]


def run_pytest(part: str, label: str, paths, workers: int, extra, env, logs: Path, device_of):
    """Run pytest on `paths` to its end, with a log and a JUnit report in `logs` named
    `label`, and return the table's rows of `part`."""
    report = logs / f"{label}.xml"
    command = pytest_command([str(path) for path in paths], report, workers, extra)
    with open(logs / f"{label}.log", "w") as log:
        subprocess.run(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    return [(part, *row) for row in rows_from_report(report, device_of)]


def rows_from_report(report: Path, device_of) -> list[tuple[str, str, str, float]]:
    """(name, device, outcome, seconds) of each test case in a JUnit XML report;
    `device_of(name)` says where it ran."""
    if not report.exists():
        return [("(pytest wrote no report)", "-", "FAILED", 0.0)]
    rows = []
    for case in ElementTree.parse(report).iter("testcase"):
        name = case.get("name", "?")
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        skipped = case.find("skipped")
        if problem is not None:
            text = f"{problem.get('message', '')}\n{problem.text or ''}"
            ended = outcome(True, text)
        elif skipped is not None:
            ended = skipped.get("message", "skipped").removeprefix("Skipped: ")
        else:
            ended = "passed"
        rows.append((name, device_of(name), ended, float(case.get("time", 0))))
    return rows


def notebook_device(gpus: int, device: str):
    """Where each notebook runs: by its declaration on CUDA machines, else the CPU."""
    chosen = {}
    for notebook in lesson_notebooks([]):
        declared = declaration(notebook)
        chosen[notebook.name] = where(gpus, **declared) if device == "cuda" else "cpu"
    return lambda name: chosen.get(name, "?")


def table(rows: list[tuple[str, str, str, str, float]]) -> str:
    lines = [f"{'part':<10} {'what':<72} {'device':<7} {'seconds':>7}  result"]
    for part, name, device, ended, seconds in rows:
        lines.append(f"{part:<10} {name[:72]:<72} {device:<7} {seconds:7.0f}  {ended}")
    counts = Counter(ended for *_, ended, _ in rows)
    lines.append(", ".join(f"{count} {ended}" for ended, count in sorted(counts.items())))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--scripts", nargs="+", help="only these launches (course.launches)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--logs", type=Path, help="keep the logs and reports here")
    args = parser.parse_args()

    import torch  # after the arguments: --help needs no torch

    from common.distributed import cuda_gpus

    gpus = cuda_gpus()
    if args.device == "cuda" and not gpus:
        sys.exit(
            "the GPU mode needs a CUDA GPU and PyTorch sees none: run it on a GPU "
            "machine, or with --device cpu (the CPU suite is `python -m pytest`)"
        )
    logs = args.logs or Path(tempfile.mkdtemp(prefix="gpu_mode-"))
    logs.mkdir(parents=True, exist_ok=True)
    name = torch.cuda.get_device_name(0) if gpus else "no GPU"
    print(
        f"GPU mode on {args.device}: {gpus} x {name}, PyTorch {torch.__version__}, "
        f"Python {sys.version.split()[0]}; logs in {logs}",
        flush=True,
    )

    began, rows = time.monotonic(), []
    if "tests" in args.parts:
        test_env = {**os.environ, "COURSE_TEST_DEVICE": args.device}
        on_device = lambda _: args.device  # noqa: E731
        rows += run_pytest("tests", "tests", TESTS, 0, [], test_env, logs, on_device)

    if "scripts" in args.parts:
        planned = plan_scripts(args.device, gpus)
        chosen = [
            (launch, n) for launch, n in planned if not args.scripts or launch.name in args.scripts
        ]
        with open(logs / "scripts.log", "w") as log:
            for launch, processes in chosen:
                label = f"{launch.script} x{processes or launch.fewest}"
                if processes:
                    ended, seconds = run_script(launch, processes, args.device, log)
                    rows.append(("scripts", label, args.device, ended, seconds))
                else:
                    rows.append(("scripts", label, "-", f"needs {launch.fewest} GPUs", 0.0))

    if "notebooks" in args.parts:
        notebook_env = {k: v for k, v in os.environ.items() if k != "DDP_DEVICE"}
        if args.device == "cpu":
            notebook_env["DDP_DEVICE"] = "cpu"
        device_of = notebook_device(gpus, args.device)
        notebooks = [nb.relative_to(REPO) for nb in lesson_notebooks([])]
        on_gpus = [nb for nb in notebooks if device_of(nb.name) == "cuda"]
        on_cpu = [nb for nb in notebooks if device_of(nb.name) != "cuda"]
        cpu_workers = max(1, min(len(on_cpu), (os.cpu_count() or 2) // 2))
        for label, group, workers in (
            ("notebooks-on-gpus", on_gpus, 0),  # each has the GPUs to itself
            ("notebooks-on-cpu", on_cpu, cpu_workers),
        ):
            if group:
                nbmake = ["--nbmake"]
                rows += run_pytest(
                    "notebooks", label, group, workers, nbmake, notebook_env, logs, device_of
                )

    summary = table(rows)
    (logs / "table.txt").write_text(summary + "\n")
    print(summary)
    if args.device == "cuda" and set(args.parts) == set(PARTS) and not args.scripts:
        results.record(
            "gpu",
            [f"{gpus} x {name}", torch.__version__, sys.version.split()[0], results.commit(),
             results.today(), summary.splitlines()[-1], f"{time.monotonic() - began:.0f} s"],
        )  # fmt: skip
    sys.exit(1 if any(ended == "FAILED" for *_, ended, _ in rows) else 0)


if __name__ == "__main__":
    main()
