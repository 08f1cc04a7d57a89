"""Look inside a hung job from outside, as on a cluster's node: each rank's Python stack,
its flight record of collectives, its state and its ports.

Lesson 04's own, beside the scripts of its part 2 (`04_multinode_hangs.ipynb`), which
take their options from `add_hang_options`; the notebook (`from hangs import hang_tools`,
from the lesson's folder) and `tests/test_04_hangs.py` use the rest, and part 1's
troubleshooting uses `key_lines`. The scripts print each rank's PID first
(`[rank1] pid 1234 ...`), dump their stacks on SIGUSR2 (faulthandler) and write a
flight record per rank when a collective times out; these functions read all that.
"""

import argparse
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from common.cli import positive_seconds
from common.listening import tcp_sockets
from common.output import plain_text
from common.versions import release

# A job's own lines and its errors; not the stack traces, nor torchrun's failure report.
KEY = re.compile(r"^\[rank\d\] |\w+Error\b|Detected mismatch|failed to pass|^(port|node) \d")
NOISE = re.compile(r"ChildFailedError|raise |^frame #|^Exception raised from")
PID_LINE = re.compile(r"^\[rank(\d+)\] pid (\d+) ", re.MULTILINE)
# What two of the tools do on gloo with each PyTorch release, measured here (CPU, one
# machine, Python 3.11) with `ddp_under_detail` and `fr_trace_as_written`:
# building a DDP model under TORCH_DISTRIBUTED_DEBUG=DETAIL, and PyTorch's flight-record
# reader on gloo's records as written. The hangs notebook's check asserts the running
# release's row, so a release that changes either fails it. 2.15,
# which requirements.txt allows, could not be installed where this was measured.
MEASURED = {
    minor: {"DDP under DETAIL": "SIGSEGV", "fr_trace on gloo's records": "KeyError"}
    for minor in ("2.11", "2.12", "2.13", "2.14")
}
# faulthandler prints the threads newest first, so a dump ends with the main thread's
# outermost frame: the script's module level.
END_OF_DUMP = r'^  File ".*", line \d+ in <module>$'


def add_hang_options(parser: argparse.ArgumentParser, timeout: float, checks_in: str, fixed: str):
    """The options of the hang scripts (`04_multinode/hangs/`): --timeout, the process
    group's, instead of the backend's default; --monitored_barrier, where every rank
    checks in (`checks_in`: when); --fixed, the run without the bug (`fixed`: what)."""
    parser.add_argument(
        "--timeout", type=positive_seconds, default=timeout, help="process group timeout (s)"
    )
    parser.add_argument(
        "--monitored_barrier",
        action="store_true",
        help=f"every rank checks in at a monitored barrier {checks_in}",
    )
    parser.add_argument("--fixed", action="store_true", help=fixed)


def key_lines(output: str, width: int = 260) -> list[str]:
    """The lines of a failed job's output that matter (also part 1's troubleshooting)."""
    lines = output.splitlines()
    return [line[:width] for line in lines if KEY.search(line) and not NOISE.search(line)]


def rank_pids(job, world_size: int, timeout: float) -> dict[int, int]:
    """{rank: PID} of a running job, from the line each rank prints first."""
    for rank in range(world_size):
        job.wait_for(rf"^\[rank{rank}\] pid \d+ ", timeout)
    return {int(rank): int(pid) for rank, pid in PID_LINE.findall(job.output)}


def faulthandler_stacks(job, pids: dict[int, int], timeout: float) -> dict[int, str]:
    """Each rank's own dump of its threads' stacks (SIGUSR2, faulthandler), read from the
    job's output. The ranks share one output stream, so one rank at a time: the next
    rank is signalled once the previous dump has ended. Written for this lesson's 2
    ranks: the second dump is read once the job has ended (a hung job ends failing,
    at its process group's timeout)."""
    first, second = sorted(pids)
    os.kill(pids[first], signal.SIGUSR2)
    job.wait_for(END_OF_DUMP, timeout)
    os.kill(pids[second], signal.SIGUSR2)
    job.wait(timeout, expect_failure=True)
    return dict(zip((first, second), stack_dumps(job.output), strict=False))


def stack_dumps(output: str) -> list[str]:
    """The faulthandler dumps in a command's output, in order."""
    dumps, current = [], None
    for line in output.splitlines():
        if re.match(r"^(Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):", line):
            current = [] if current is None else current
        if current is not None and (
            line.startswith(("Current thread", "Thread", "  File")) or not line
        ):
            current.append(line)
            if re.match(END_OF_DUMP, line):
                dumps.append("\n".join(current))
                current = None
    return dumps


def py_spy() -> str | None:
    """The py-spy command of this Python environment (requirements.txt installs it)."""
    here = Path(sys.executable).parent
    return shutil.which("py-spy", path=f"{here}{os.pathsep}{os.environ.get('PATH', '')}")


class PySpyFailed(RuntimeError):
    """py-spy could not read the process; the message is py-spy's own."""


def py_spy_dump(pid: int, until: str, timeout: float, nonblocking: bool = False) -> str:
    """`py-spy dump --pid PID`: the Python stack of every thread of a process, read from
    outside it (ptrace). Asked again, a tenth of a second apart, until the dump matches
    the regular expression `until` (a rank can be a moment away from the call it will
    hang in) or `timeout` seconds have passed. Attaching can fail for a moment (a thread
    that starts or ends meanwhile): a failure counts only if it lasts to the end.
    `nonblocking` reads without stopping the process: needed for a stopped process."""
    command = [py_spy() or "py-spy", "dump", "--pid", str(pid)]
    command += ["--nonblocking"] if nonblocking else []
    # Plain text: a Jupyter kernel sets CLICOLOR_FORCE, and py-spy would colour its dump.
    deadline = time.monotonic() + timeout
    while True:
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=timeout,
                env=plain_text(os.environ),
            )
        except FileNotFoundError:
            raise PySpyFailed("py-spy is not installed: pip install -r requirements.txt") from None
        if done.returncode == 0 and re.search(until, done.stdout):
            return done.stdout
        if time.monotonic() > deadline:
            if done.returncode != 0:
                said = (done.stderr + done.stdout).split("Stack backtrace:")[0]
                lines = [line.strip() for line in said.splitlines() if line.strip()]
                raise PySpyFailed("; ".join(lines))
            raise TimeoutError(f"py-spy: no stack of PID {pid} matched {until!r}:\n{done.stdout}")
        time.sleep(0.1)


def why_py_spy_cannot_run() -> str | None:
    """None when py-spy can read another process of this user here, else why not. The
    probe reads this very process, which is not a child of py-spy, as the ranks of a
    job are not: where Yama's ptrace_scope is 1 (Ubuntu's default), only root can."""
    try:
        py_spy_dump(os.getpid(), until="", timeout=3)
    except PySpyFailed as failure:
        scope = Path("/proc/sys/kernel/yama/ptrace_scope")
        setting = (
            f" (kernel.yama.ptrace_scope={scope.read_text().strip()})" if scope.exists() else ""
        )
        return f"py-spy cannot read this user's processes here{setting}: {failure}"
    return None


def wait_for_state(pid: int, state: str, timeout: float) -> str:
    """Wait until the kernel reports the process in `state` ('stopped', 'sleeping', ...:
    psutil's names), polling it; return the state."""
    deadline = time.monotonic() + timeout
    while (now := psutil.Process(pid).status()) != state:
        if time.monotonic() > deadline:
            raise TimeoutError(f"PID {pid} is {now!r}, not {state!r}, after {timeout:g} s")
        time.sleep(0.05)
    return now


def tcp_ports(pids: dict[str, int]) -> list[tuple[str, str, int, str]]:
    """(process, state, local port, remote address) of every TCP socket of each named
    process: what a firewall between nodes would have to let through."""
    sockets = []
    for name, pid in pids.items():
        for connection in tcp_sockets(psutil.Process(pid)):
            remote = f"{connection.raddr.ip}:{connection.raddr.port}" if connection.raddr else ""
            sockets.append((name, connection.status, connection.laddr.port, remote))
    return sorted(sockets)


def read_flight_records(folder: Path) -> dict[int, dict]:
    """{rank: record} from the files `<prefix><rank>` a job wrote to `folder`."""
    records = {}
    for path in sorted(Path(folder).iterdir()):
        rank = int(re.search(r"(\d+)$", path.name).group(1))
        records[rank] = pickle.loads(path.read_bytes())
    return records


def repair_for_fr_trace(folder: Path, repaired: Path) -> None:
    """Copy a gloo job's flight records into `repaired`, with the table of process
    groups keyed by the names their entries use. gloo records the group before it gets
    its name (key ''), while each entry names it ('0'): PyTorch's reader, which looks
    groups up by that name, then stops with a KeyError."""
    repaired.mkdir(parents=True, exist_ok=True)
    for path in sorted(Path(folder).iterdir()):
        record = pickle.loads(path.read_bytes())
        ranks = {group["ranks"] for group in record["pg_config"].values()}
        if len(ranks) == 1:  # one group: the default one, as in this lesson's scripts
            (members,) = ranks
            groups = {tuple(entry["process_group"]) for entry in record["entries"]}
            record["pg_config"] = {
                name: {"name": name, "desc": desc, "ranks": members} for name, desc in groups
            }
        (repaired / path.name).write_bytes(pickle.dumps(record))


def last_collectives(records: dict[int, dict], count: int = 3) -> list[str]:
    """Each rank's last `count` collectives as table rows, with the script line that
    made each call (the flight record keeps the Python stack of every call)."""
    rows = [f"{'rank':>4}  {'seq':>3}  {'call':<17} {'input sizes':<12} called from"]
    for rank, record in sorted(records.items()):
        for entry in record["entries"][-count:]:
            caller = next(
                (
                    f"{Path(f['filename']).name}:{f['line']} {f['name']}"
                    for f in entry.get("frames", [])
                    if "torch" not in Path(f["filename"]).parts
                ),
                "",
            )
            sizes = str(entry["input_sizes"])
            rows.append(
                f"{rank:>4}  {entry['collective_seq_id']:>3}  {entry['profiling_name']:<17} "
                f"{sizes:<12} {caller}"
            )
    return rows


DDP_UNDER_DETAIL = (
    "import torch, torch.distributed as dist; "
    "dist.init_process_group('gloo', store=dist.HashStore(), rank=0, world_size=1); "
    "torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1, 1)); print('DDP built')"
)


def ddp_under_detail(folder: Path) -> str:
    """What building a DDP model on gloo does under TORCH_DISTRIBUTED_DEBUG=DETAIL, in a
    process of its own (started in `folder`): 'builds', or the signal that ended it
    ('SIGSEGV'), or its exit status."""
    env = {**os.environ, "TORCH_DISTRIBUTED_DEBUG": "DETAIL"}
    done = subprocess.run(
        [sys.executable, "-c", DDP_UNDER_DETAIL], capture_output=True, text=True,
        timeout=120, cwd=folder, env=env,
    )  # fmt: skip
    if done.returncode == 0 and "DDP built" in done.stdout:
        return "builds"
    if done.returncode < 0:
        return signal.Signals(-done.returncode).name
    return f"exit status {done.returncode}"


def fr_trace_as_written(output: str) -> str:
    """What PyTorch's reader did with gloo's records as written, from its output:
    'KeyError' (its lookup of the group, repaired by repair_for_fr_trace) or 'reads'."""
    return "KeyError" if re.search(r"KeyError: \('0', [01]\)", output) else "reads"


def measured(what: str, version: str) -> str | None:
    """What MEASURED says `what` does with PyTorch `version` ('2.14.1+cu130'); None for
    a release not measured."""
    major, minor = release(version)
    return MEASURED.get(f"{major}.{minor}", {}).get(what)
