"""Shared fixtures and helpers for the tests."""

import fcntl
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import nbformat
import psutil
import pytest
import torch
import torch.multiprocessing as mp

from common.output import FORCING_COLOUR
from common.ports import free_port
from course import exercises

# Two test workers on 2 cores run notebooks and DDP processes side by side. With
# PyTorch's default of one intra-op thread per core, each process that torchrun did not
# start (notebook kernels, mp.spawn, single-process runs) would fight the others for
# both cores. One thread each, as torchrun sets for its workers; a value already set
# wins. Measured on this 2-core machine, under the suite: notebook 02_multigpu_topics
# 86 s -> 56 s, 03_fault_tolerance 60 s -> 45 s.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# The suite proves the course on the CPU, on every machine: on a GPU machine too, where
# several agents on one machine would share GPU 0 and the notebooks' 3- and 4-process
# launches need as many GPUs. tests/test_gpu_mode.py is the GPU mode: it launches the
# lesson scripts on the GPUs where there are some (docs/gpus.md). A
# DDP_DEVICE already set wins.
os.environ.setdefault("DDP_DEVICE", "cpu")

# The tests read what the commands they start print, as plain text: no variable that
# forces colour reaches them, and Python 3.13's coloured tracebacks stay off
# (common.launch.plain_text says why; the commands run through `run` get it there).
for name in FORCING_COLOUR:
    os.environ.pop(name, None)
os.environ["PYTHON_COLORS"] = "0"

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = Path(__file__).resolve().parent / "scripts"
PYTHON = sys.executable


def lesson_module(lesson: str, name: str):
    """Import `lesson/name.py` under a name of its own (`05_mingpt/model.py` becomes
    `lesson_05_mingpt_model`), without leaving the lesson folder on sys.path: generic
    names such as `model` or `config` can then never resolve to another folder's file.
    A module that imports a sibling by its plain name (`from config import ...`, as the
    lesson's scripts do) gets the sibling under its own name too, and one copy of it."""
    unique = f"lesson_{lesson}_{name}"
    if unique in sys.modules:
        return sys.modules[unique]
    folder = REPO / lesson
    siblings = [path.stem for path in folder.glob("*.py")]
    borrowed = {s: sys.modules[f"lesson_{lesson}_{s}"] for s in siblings
                if f"lesson_{lesson}_{s}" in sys.modules and s not in sys.modules}  # fmt: skip
    sys.modules.update(borrowed)  # plain names, only while this module runs its imports
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location(unique, folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[unique] = module
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(folder))
        for sibling in siblings:
            loaded = sys.modules.get(sibling)
            if loaded is not None and Path(getattr(loaded, "__file__", "")).parent == folder:
                sys.modules.setdefault(f"lesson_{lesson}_{sibling}", loaded)
                del sys.modules[sibling]
    return module


def lesson_05_text(folder: Path, characters: int = 24_000) -> Path:
    """`folder`/text.txt: the first `characters` of lesson 05's text, on which a tiny
    model trains in seconds (24,000: 21 global batches of 32 an epoch)."""
    text, _ = lesson_module("05_mingpt", "char_dataset").load_text(None)
    path = folder / "text.txt"
    path.write_text(text[:characters], encoding="utf-8")
    return path


def metrics(folder: Path) -> list[dict]:
    """The rows of the metrics file that lesson 05's trainer wrote in `folder`."""
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def assert_same_tensors(one: dict, other: dict) -> None:
    """The two dicts (state dicts) have the same names, each holding bit-equal tensors."""
    assert one.keys() == other.keys()
    for name, tensor in one.items():
        assert torch.equal(tensor, other[name]), name


def tracked_texts() -> dict[str, str]:
    """Every file git tracks, by path, as text: for checks that no file says something."""
    names = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    return {name: (REPO / name).read_text(encoding="utf-8", errors="replace") for name in names}


def lesson_scripts() -> list[Path]:
    """Every lesson script: a file of a lesson folder with a `__main__` block (the modules
    beside the scripts are imported, not run), the exercises' files aside."""
    return [
        path
        for path in sorted(REPO.glob("[0-9][0-9]_*/**/*.py"))
        if "exercises" not in path.parts and '__name__ == "__main__"' in path.read_text()
    ]


def made_once(tmp_path_factory, name: str, make: Callable[[Path], None]) -> Path:
    """The folder `name`, filled by `make(folder)` once per test run, whichever xdist
    worker asks first; the other waits for it under a lock and reads the same folder.
    (A module-scoped fixture runs once per worker that runs a test of the module: the
    site built, or a run trained, twice. pytest-xdist's docs give this recipe.)"""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's folder, above each worker's own
    folder = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (folder / ".made").exists():  # nobody made it, or `make` failed
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            (folder / ".made").touch()
    return folder


def run_forked(commands: list[tuple[Path, list[str]]], cwd: Path) -> list[dict]:
    """Run each `python SCRIPT ARGUMENTS` in `cwd` as the interpreter would, but in a
    child forked after torch is imported once (tests/scripts/run_scripts_forked.py):
    ~0.2 s per command instead of ~2.5 s. Returns {"status", "stdout", "stderr"} each."""
    finished = subprocess.run(
        [PYTHON, SCRIPTS / "run_scripts_forked.py"],
        input=json.dumps([(str(script), arguments) for script, arguments in commands]),
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    return json.loads(finished.stdout)


def spawn(function: Callable, nprocs: int, *args) -> None:
    """`function(rank, *args)` in `nprocs` processes, as `mp.spawn` runs it (a failure in
    one fails the test with its traceback), but forked from the server the exercise checks
    fork from (`course.exercises.forkserver`: a fresh process that imported torch and
    torch._dynamo once, safe to fork, unlike this test worker). The processes get the
    server's environment: this worker's when it first forked (OMP_NUM_THREADS=1 above)."""
    exercises.forkserver()
    mp.start_processes(function, args, nprocs, start_method="forkserver")


def one_worker_environment() -> dict[str, str]:
    """What torchrun gives the one worker of a world of one, its store on 127.0.0.1: for a
    script started as that worker alone, without torchrun's agent (one process, not two)."""
    return {
        **{"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"},
        **{"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())},
    }


def code_notebook(path: Path, *cells: str) -> Path:
    """Write a notebook of these code cells at `path`, for Jupyter's python3 kernel."""
    kernel = {"name": "python3", "display_name": "Python 3", "language": "python"}
    code = [nbformat.v4.new_code_cell(source) for source in cells]
    nbformat.write(nbformat.v4.new_notebook(cells=code, metadata={"kernelspec": kernel}), path)
    return path


def run_nbmake(cwd: Path, *arguments: str, env=None, timeout: float = 120):
    """`pytest --nbmake` in a process of its own, on the notebooks and with the options of
    `arguments`, its kernels the suite's (course.kernels: over Unix sockets, so that no
    DDP job of the suite running beside it can take their ports)."""
    return subprocess.run(
        [PYTHON, "-m", "pytest", "-p", "course.kernels", "-p", "no:cacheprovider", "--nbmake"]
        + list(arguments),
        cwd=cwd,
        env=os.environ | {"PYTHONPATH": str(REPO)} | (env or {}),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_with_sitecustomize(tmp_path: Path, code: str, command: str, **options) -> str:
    """`common.launch.run(command)` with `code` as the `sitecustomize` module of every
    Python it starts (torchrun's and each worker's): a change injected from outside, so
    that the lesson scripts run as a learner reads them."""
    from common.launch import run

    injection = tmp_path / "injection"
    injection.mkdir()
    (injection / "sitecustomize.py").write_text(code)
    path = os.pathsep.join([str(injection), str(REPO)])
    return run(command, cwd=tmp_path, env={"PYTHONPATH": path}, quiet=True, **options)


def pids_in(output: str) -> list[int]:
    """Every number printed after 'pid' in a command's output."""
    return [int(pid) for pid in re.findall(r"pid[ =](\d+)", output)]


def is_gone(pid: int) -> bool:
    """True when the process no longer runs (a zombie waiting to be reaped by init
    counts as gone: it holds no port and uses no CPU)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# CI runs as root and installs the system packages first (`.ci/run`): there, a part of
# the course that cannot run is a failure, not a skip that nobody reads.
STRICT = os.environ.get("COURSE_STRICT") == "1"


def skip_or_fail(reason: str | None) -> None:
    """Skip with `reason` (pytest prints it: `-rs`), or fail with it when COURSE_STRICT=1."""
    if reason is None:
        return
    if STRICT:
        pytest.fail(f"COURSE_STRICT=1, and this part cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def slurm_installed():
    """Lesson 04's local Slurm cluster can start here (root, Slurm installed), or the
    test skips saying why (fails under COURSE_STRICT=1)."""
    from course.cluster import slurm  # only the tests that use the cluster load its code

    skip_or_fail(slurm.why_unavailable())


def fake_cuda_gpus(monkeypatch, count: int) -> None:
    """Make PyTorch in this process report `count` usable CUDA GPUs (none here)."""
    cuda = torch.device("cuda") if count else None
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda **_: cuda)
    monkeypatch.setattr(torch.accelerator, "device_count", lambda: count)


@pytest.fixture(scope="session")
def chromium():
    """Debian's chromium is here for the browser tests, or the test skips saying why
    (fails under COURSE_STRICT=1)."""
    from course import browser_check  # only the browser tests load its code

    skip_or_fail(browser_check.why_no_chromium())
