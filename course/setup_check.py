"""Check that this machine can run the course, before the first lesson.

    .venv/bin/python -m course.setup_check

Introduced in 00_intro. Each line is OK, a NOTE (the course runs, with a caveat), or
FAIL with the fix in one line. Exits 1 when something the course needs is missing.
"""

import os
import platform
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
MIN_PYTHON = (3, 10)
MIN_TORCH = (2, 13)
REINSTALL = "run: .venv/bin/pip install -r requirements.txt"


@dataclass
class Result:
    status: str  # "OK", "NOTE" or "FAIL"
    item: str
    detail: str


def check_python() -> Result:
    version = platform.python_version()
    if sys.version_info[:2] < MIN_PYTHON:
        wanted = ".".join(map(str, MIN_PYTHON))
        return Result("FAIL", "Python", f"{version}: the course needs {wanted} or newer")
    return Result("OK", "Python", version)


def check_torch() -> Result:
    try:
        import torch
    except ImportError:
        return Result("FAIL", "PyTorch", f"not installed; {REINSTALL}")
    major, minor = (int(part) for part in torch.__version__.split(".")[:2])
    if (major, minor) < MIN_TORCH:
        return Result("FAIL", "PyTorch", f"{torch.__version__} is too old; {REINSTALL}")
    return Result("OK", "PyTorch", torch.__version__)


def check_backends() -> list[Result]:
    import torch
    import torch.distributed as dist

    results = []
    if not (dist.is_available() and dist.is_gloo_available()):
        fix = "this PyTorch build has no gloo; install the official build: " + REINSTALL
        results.append(Result("FAIL", "gloo backend", fix))
    else:
        results.append(Result("OK", "gloo backend", "available (CPU processes talk gloo)"))
    gpus = torch.cuda.device_count()
    if gpus and dist.is_nccl_available():
        results.append(Result("OK", "CUDA + nccl", f"{gpus} GPU(s): the scripts use them"))
    else:
        results.append(Result("NOTE", "CUDA + nccl", "no GPU: every lesson runs on the CPU"))
    return results


def check_cores_and_memory() -> list[Result]:
    cores = os.cpu_count() or 1
    cores_status = "OK" if cores >= 2 else "NOTE"
    cores_detail = f"{cores}" + ("" if cores >= 2 else ": works, but 2 processes share one core")
    free_gib = psutil.virtual_memory().available / 2**30
    memory_status = "OK" if free_gib >= 4 else "NOTE"
    memory_detail = f"{free_gib:.1f} GiB available" + (
        "" if free_gib >= 4 else ": close other programs; 4 GiB lets every lesson run"
    )
    return [
        Result(cores_status, "CPU cores", cores_detail),
        Result(memory_status, "free memory", memory_detail),
    ]


def check_loopback_port() -> Result:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            sock.listen()
            port = sock.getsockname()[1]
    except OSError as error:
        fix = "processes meet on 127.0.0.1: check that the loopback interface is up"
        return Result("FAIL", "ports on 127.0.0.1", f"cannot listen ({error}); {fix}")
    return Result("OK", "ports on 127.0.0.1", f"can listen (tried port {port})")


def check_torchrun() -> Result:
    from common.launch import CommandFailed, run

    hello = REPO / "00_intro" / "hello_torchrun.py"
    started = time.monotonic()
    try:
        output = run(f"torchrun --standalone --nproc_per_node=2 {hello}", timeout=180, quiet=True)
    except CommandFailed as error:
        last = error.output.strip().splitlines()[-1:] or ["no output"]
        return Result("FAIL", "torchrun, 2 processes", f"{error} ({last[0][:100]})")
    seconds = time.monotonic() - started
    if output.count("all_reduce(SUM) of the ranks = 1 (expected 1)") != 2:
        return Result("FAIL", "torchrun, 2 processes", "ran, but the all_reduce result is wrong")
    return Result(
        "OK", "torchrun, 2 processes", f"a gloo world of 2 started and ran in {seconds:.1f} s"
    )


def check_jupyter_kernel() -> Result:
    try:
        from jupyter_client.kernelspec import KernelSpecManager

        KernelSpecManager().get_kernel_spec("python3")
    except Exception as error:  # not installed, or no kernel
        return Result("FAIL", "Jupyter kernel", f"{type(error).__name__}; {REINSTALL}")
    return Result("OK", "Jupyter kernel", "python3, from this environment")


def all_checks() -> list[Result]:
    results = [check_python(), check_torch()]
    if results[-1].status == "FAIL":
        return results  # nothing below works without torch
    results += check_backends()
    results += check_cores_and_memory()
    results += [check_loopback_port(), check_jupyter_kernel(), check_torchrun()]
    return results


def main() -> int:
    print("Checking this machine for the DDP course ...", flush=True)
    results = all_checks()
    for result in results:
        print(f"  {result.status:<5} {result.item:<22} {result.detail}")
    failed = [result for result in results if result.status == "FAIL"]
    if failed:
        print(f"\n{len(failed)} check(s) failed: fix them as said above, then run this again.")
        return 1
    print("\nReady: start with .venv/bin/jupyter lab and open 00_intro/00_intro.ipynb")
    return 0


if __name__ == "__main__":
    sys.exit(main())
