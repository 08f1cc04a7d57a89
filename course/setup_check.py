"""Check that this machine can run the course, before the first lesson.

    .venv/bin/python -m course.setup_check

Introduced in 00_intro. Each line is OK, a NOTE (the course runs, with a caveat), or
FAIL with the fix in one line. Exits 1 when something the course needs is missing.
"""

import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from common.listening import outside_addresses
from course.system_packages import is_root

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
    from common.versions import release

    if release(torch.__version__) < MIN_TORCH:
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
        detail = (
            f"{gpus} GPU(s): a launch of at most {gpus} process(es) per machine runs on them; "
            "each notebook's first line says where all its launches run"
        )
        results.append(Result("OK", "CUDA + nccl", detail))
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
    from common.distributed import cuda_gpus
    from common.launch import CommandFailed, run
    from common.notebook_device import where

    hello = REPO / "00_intro" / "hello_torchrun.py"
    device = where(cuda_gpus(), processes_per_machine=2)  # as a notebook of 2 decides
    started = time.monotonic()
    try:
        command = f"torchrun --standalone --nproc_per_node=2 {hello}"
        output = run(command, timeout=180, quiet=True, env={"DDP_DEVICE": device})
    except CommandFailed as error:
        last = error.output.strip().splitlines()[-1:] or ["no output"]
        return Result("FAIL", "torchrun, 2 processes", f"{error} ({last[0][:100]})")
    seconds = time.monotonic() - started
    if output.count("all_reduce(SUM) of the ranks = 1 (expected 1)") != 2:
        return Result("FAIL", "torchrun, 2 processes", "ran, but the all_reduce result is wrong")
    backend = re.search(r"backend=(\w+)", output)[1]
    detail = f"a {backend} world of 2 started and ran in {seconds:.1f} s"
    return Result("OK", "torchrun, 2 processes", detail)


def check_jupyter_kernel() -> Result:
    try:
        from jupyter_client.kernelspec import KernelSpecManager

        spec = KernelSpecManager().get_kernel_spec("python3")
    except Exception as error:  # not installed, or no kernel
        return Result("FAIL", "Jupyter kernel", f"{type(error).__name__}; {REINSTALL}")
    interpreter = spec.argv[0]
    # Jupyter starts "python", "python3" and "python3.X" as the Python that runs it: with
    # .venv/bin/jupyter, this environment's. Any other path is some other Python, where
    # the notebooks fail with "No module named 'common'".
    major, minor = sys.version_info[:2]
    own_names = {"python", f"python{major}", f"python{major}.{minor}"}
    here = Path(os.path.abspath(sys.executable)).parent
    if interpreter in own_names or Path(os.path.abspath(interpreter)).parent == here:
        return Result("OK", "Jupyter kernel", "python3, from this environment")
    return Result(
        "FAIL",
        "Jupyter kernel",
        f"'python3' (in {spec.resource_dir}) runs {interpreter}, not this environment's "
        "Python; remove that kernel (jupyter kernelspec remove python3) or unset "
        "JUPYTER_PATH / JUPYTER_PREFER_ENV_PATH",
    )


def check_hostname() -> Result:
    """`torchrun --standalone` tells its workers to find its store at this machine's
    name (`socket.getfqdn()`); a name that does not resolve makes them retry for
    minutes. The notebooks launch with 127.0.0.1 instead (`common.launch`), and one-
    machine worlds give gloo the loopback interface (`common.distributed`), so only
    torchrun typed in a terminal needs the name."""
    if os.environ.get("PET_LOCAL_ADDR"):
        return Result("OK", "hostname", f"not used: PET_LOCAL_ADDR={os.environ['PET_LOCAL_ADDR']}")
    name = socket.getfqdn()
    try:
        socket.getaddrinfo(name, None)
    except OSError as error:
        return Result(
            "NOTE",
            "hostname",
            f"{name!r} does not resolve ({error.strerror}): the notebooks do not need it, but "
            "torchrun --standalone in a terminal would hang; add --local-addr=127.0.0.1 to "
            "those commands, or map the name to 127.0.0.1 in /etc/hosts",
        )
    return Result("OK", "hostname", f"{name} resolves (torchrun --standalone gives it to workers)")


def check_network() -> Result:
    """torchrun's stores listen on every interface, whatever address a launch names
    (lesson 04, "What a job exposes on the network"): on a machine with an address
    besides loopback, anyone on that network can reach a running job."""
    outside = outside_addresses()
    if not outside:
        return Result("OK", "network exposure", "no address besides loopback: jobs stay here")
    shown = ", ".join(f"{address} ({interface})" for interface, address in outside[:4])
    more = f" and {len(outside) - 4} more" if len(outside) > 4 else ""
    return Result(
        "NOTE",
        "network exposure",
        f"a running job's stores are reachable at {shown}{more}: run the course on a "
        "network you trust, or block other machines with a firewall (lesson 04, "
        '"What a job exposes on the network"; WORKSHOP.md for a classroom)',
    )


def check_platform() -> Result:
    system = platform.system()
    if system == "Windows":
        return Result(
            "FAIL",
            "operating system",
            "native Windows is not supported (its torch wheels have no libuv for the "
            "rendezvous store, and the commands use .venv/bin): use WSL2, with the "
            "clone in the Linux home folder",
        )
    return Result("OK", "operating system", f"{system} {platform.machine()}")


def check_libuv() -> Result:
    """torchrun's rendezvous store asks for libuv, whatever USE_LIBUV says (torch 2.14);
    builds without it (the native Windows wheels) cannot start a torchrun job."""
    import torch.distributed as dist

    try:
        store = dist.TCPStore(
            "127.0.0.1", 0, is_master=True, wait_for_workers=False, use_libuv=True
        )
    except (RuntimeError, ValueError) as error:
        if "libuv" not in str(error):
            raise
        fix = "torchrun cannot start here; use Linux, macOS or WSL2 with the official wheels"
        return Result("FAIL", "libuv store", f"{str(error).splitlines()[0]}; {fix}")
    del store
    return Result("OK", "libuv store", "available (torchrun's rendezvous store uses it)")


def check_gpu_driver() -> Result | None:
    """None unless nvidia-smi works while torch sees no GPU: then say why."""
    import torch

    nvidia_smi = shutil.which("nvidia-smi")
    if nvidia_smi is None or torch.cuda.device_count() > 0:
        return None
    try:
        listed = subprocess.run([nvidia_smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if listed.returncode != 0 or "GPU" not in listed.stdout:
        return None
    built_for = torch.version.cuda or "no CUDA (a CPU-only build)"
    return Result(
        "NOTE",
        "GPU driver",
        f"nvidia-smi lists a GPU but this torch ({torch.__version__}, CUDA {built_for}) "
        "sees none: the driver is too old for this build, or torch is the CPU build; "
        "the course runs on the CPU",
    )


def all_checks() -> list[Result]:
    results = [check_platform(), check_python(), check_torch()]
    if results[-1].status == "FAIL":
        return results  # nothing below works without torch
    results += check_backends() + [check_libuv()]
    results += [check] if (check := check_gpu_driver()) else []
    results += check_cores_and_memory()
    results += [check_loopback_port(), check_hostname(), check_network()]
    results += [check_jupyter_kernel(), check_torchrun()]
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
    print(f"\nReady: start with {jupyter_command()} and open 00_intro/00_intro.ipynb")
    return 0


def jupyter_command() -> str:
    """How to start Jupyter here: as root it refuses to, unless told --allow-root."""
    return ".venv/bin/jupyter lab" + (" --allow-root" if is_root() else "")


if __name__ == "__main__":
    sys.exit(main())
