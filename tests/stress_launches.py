"""Launch every DDP lesson script many times at its smallest settings and count failures.

Not a test that pytest runs: a measurement, for the claim "a finished run never fails"
(see `common.distributed.end_process` and lesson 02). Each round launches every script
of `course.launches` once (the list the GPU mode runs), with 2 processes, each in a
fresh temporary folder; a launch fails when it exits non-zero or runs past
its time limit. It prints a table of failures per script and exits 1 if any launch
failed.

    .venv/bin/python tests/stress_launches.py --rounds 12       # 12 x 30 = 360 launches
    .venv/bin/python tests/stress_launches.py --rounds 3 --only multigpu exit_abort
    .venv/bin/python tests/stress_launches.py --rounds 12 --python_teardown  # as before
                                                    # end_process: the scripts' old ending

Run it on a quiet machine: it prints the load average first.
"""

import argparse
import os
import sys
import time

from course import results
from course.launches import LAUNCHES, run_once
from course.lessons import REPO

PROCESSES = 2  # each DDP launch's world (a `python` launch runs one process)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12, help="launches of each script")
    parser.add_argument("--only", nargs="+", help="names of the launches to run")
    parser.add_argument("--time_limit", type=float, default=180, help="seconds per launch")
    parser.add_argument(
        "--python_teardown",
        action="store_true",
        help="end every script through Python's teardown, not end_process (COURSE_TEARDOWN)",
    )
    args = parser.parse_args()
    chosen = [entry for entry in LAUNCHES if not args.only or entry.name in args.only]
    if not chosen:
        sys.exit(f"--only names none of: {', '.join(entry.name for entry in LAUNCHES)}")

    ending_of = {"COURSE_TEARDOWN": "python"} if args.python_teardown else {}
    load = os.getloadavg()[0]
    print(f"load average {load:.2f} on {os.cpu_count()} cores", flush=True)
    failures = {entry.name: 0 for entry in chosen}
    aborts = 0
    started = time.monotonic()
    for round_number in range(1, args.rounds + 1):
        for entry in chosen:
            ending, output = run_once(entry.command(PROCESSES, REPO), args.time_limit, **ending_of)
            failed = ending != "exit 0"
            name = entry.name
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
    seconds = time.monotonic() - started
    print(
        f"\n{total} failed, {launches - total} passed of {launches} launches "
        f"({aborts} with 'terminate called'), {seconds:.0f} s"
    )
    failed_scripts = ", ".join(name for name, count in failures.items() if count)
    results.record(
        "stress",
        [
            f"all {len(chosen)}" if len(chosen) == len(LAUNCHES) else ", ".join(failures),
            "Python's teardown" if args.python_teardown else "end_process",
            results.commit(),
            results.today(),
            f"{total} failed of {launches} launches ({args.rounds} rounds)"
            + (f": {failed_scripts}" if total else ""),
            f"{seconds:.0f} s",
            f"{load:.2f} on {os.cpu_count()} cores",
        ],
    )
    sys.exit(1 if total else 0)


if __name__ == "__main__":
    main()
