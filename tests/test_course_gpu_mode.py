"""The GPU mode's command (`python -m course.gpu_mode`): what it plans on machines of
0 to 8 GPUs (faked), how it reads what ran, and a real run of two scripts on the CPU.
What it does on a real GPU is in docs/gpus.md."""

import os
import re
import subprocess
import sys

import psutil
import pytest
from conftest import PYTHON, REPO, fake_cuda_gpus, lesson_scripts

from course import gpu_mode
from course.launches import LAUNCHES, run_once

# Lesson scripts that join a process group but are not in course.launches, and why.
NOT_LAUNCHED = {
    "03_fault_tolerance/stale_address.py": "fails on purpose (a stale address); 03 runs it",
    "04_multinode/hangs/classic_hangs.py": "hangs on purpose; the hangs notebook runs it",
    "04_multinode/hangs/one_collective_too_many.py": "hangs on purpose; the notebook runs it",
}


def test_every_script_that_joins_a_process_group_is_launched():
    joining = {
        str(path.relative_to(REPO))
        for path in lesson_scripts()
        if "init_process_group" in path.read_text()
    }
    launched = {launch.script for launch in LAUNCHES}
    assert joining - launched == set(NOT_LAUNCHED)
    assert all((REPO / script).exists() for script in launched)


@pytest.mark.parametrize("gpus", [1, 2, 3, 4, 8])
def test_one_process_per_gpu_and_what_needs_more_is_listed(gpus):
    planned = {launch.name: processes for launch, processes in gpu_mode.plan_scripts("cuda", gpus)}
    assert len(planned) == len(LAUNCHES)
    for launch in LAUNCHES:
        wanted = min(gpus, 4) if min(gpus, 4) >= launch.fewest else None
        if launch.launcher == "python":
            wanted = 1  # one process, no process group
        assert planned[launch.name] == wanted, launch.name
    needing_two = {name for name, processes in planned.items() if processes is None}
    assert needing_two == ({"collectives_tour", "slow_rank"} if gpus == 1 else set())


def test_on_the_cpu_every_distributed_launch_gets_two_processes():
    planned = gpu_mode.plan_scripts("cpu", 0)
    assert {processes for launch, processes in planned if launch.launcher != "python"} == {2}


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_a_notebook_is_listed_on_the_device_it_chooses(gpus, monkeypatch):
    fake_cuda_gpus(monkeypatch, gpus)
    device_of = gpu_mode.notebook_device(gpus, "cuda")
    assert device_of("00_intro.ipynb") == ("cuda" if gpus >= 4 else "cpu")  # it starts 4
    assert device_of("04_multinode.ipynb") == "cpu"  # two agents on one machine: the CPU
    assert gpu_mode.notebook_device(gpus, "cpu")("00_intro.ipynb") == "cpu"


def test_a_run_that_ends_well_passes_whatever_it_printed():
    # A failed run that says it needs a newer PyTorch: the reports' test below.
    said = "x.py needs PyTorch 2.13 or newer; this is 2.11"
    assert gpu_mode.outcome(False, said) == "passed"  # exit 0 wins: nothing was refused


def test_the_pytest_reports_are_read_test_by_test(tmp_path):
    (tmp_path / "test_sample.py").write_text(
        "import sys, pytest\n"
        "def test_fine(): pass\n"
        "def test_broken(): assert 1 == 2\n"
        "def test_two_ranks(): pytest.skip('needs 2 GPUs')\n"
        "def test_old(): sys.exit('x.py needs PyTorch 2.13 or newer; this is 2.11.0')\n"
    )
    report = tmp_path / "report.xml"
    command = gpu_mode.pytest_command(["test_sample.py"], report, 0, [])
    subprocess.run(command, cwd=tmp_path, capture_output=True)
    rows = {name: ended for name, _, ended, _ in gpu_mode.rows_from_report(report, str)}
    assert rows == {
        "test_fine": "passed",
        "test_broken": "FAILED",
        "test_two_ranks": "needs 2 GPUs",
        "test_old": "needs PyTorch 2.13",
    }
    missing = gpu_mode.rows_from_report(tmp_path / "none.xml", str)
    assert missing == [("(pytest wrote no report)", "-", "FAILED", 0.0)]


def test_the_command_runs_scripts_and_ends_with_the_table(tmp_path):
    # One launch of each kind the table shows: torchrun's 2 processes, and python's 1.
    two = ["--scripts", "hello_torchrun", "single_gpu", "--logs", str(tmp_path)]
    command = [PYTHON, "-m", "course.gpu_mode", "--device", "cpu", "--parts", "scripts", *two]
    # torchrun's error files go to a new torchelastic_* folder in $TMPDIR, never removed,
    # unless run_once puts them in the launch's own folder.
    temp = tmp_path / "temp"
    temp.mkdir()
    environment = os.environ | {"TMPDIR": str(temp)}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = re.findall(r"^scripts +(\S+) x(\d) +(\S+) +\d+  (.+)$", done.stdout, re.M)
    assert rows == [
        ("00_intro/hello_torchrun.py", "2", "cpu", "passed"),
        ("02_multigpu/single_gpu.py", "1", "cpu", "passed"),
    ]
    assert done.stdout.rstrip().endswith("2 passed")
    log = (tmp_path / "scripts.log").read_text()
    assert "all_reduce(SUM) of the ranks = 1 (expected 1)" in log  # they really ran
    assert (tmp_path / "table.txt").read_text().strip() == done.stdout.split("\n", 1)[1].strip()
    # No torchrun folder left behind (torch's compile cache, torchinductor_*, may stay).
    assert [path for path in temp.iterdir() if "torchinductor" not in path.name] == []


def test_without_a_gpu_the_gpu_mode_says_so_in_one_line():
    no_gpu = {"CUDA_VISIBLE_DEVICES": "", "PATH": ""}
    done = subprocess.run(
        [sys.executable, "-m", "course.gpu_mode"], capture_output=True, text=True, env=no_gpu
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "the GPU mode needs a CUDA GPU and PyTorch sees none: run it on a GPU machine, or "
        "with --device cpu (the CPU suite is `python -m pytest`)"
    ]


def test_a_launch_past_its_time_limit_is_killed_with_every_process_it_started():
    # A stand-in for torchrun: a worker in a session of its own, as torchrun starts one
    # (neither the leader's process group nor its session holds it), its output elsewhere.
    leader = (
        "import subprocess, sys, time; "
        "worker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], "
        "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True); "
        "print('worker', worker.pid, flush=True); time.sleep(600)"
    )
    ending, output = run_once([PYTHON, "-c", leader], time_limit=5)
    assert ending == "killed after 5 s", (ending, output)
    worker = int(re.search(r"worker (\d+)", output)[1])
    try:  # killed with the leader: ends (init reaps it) at once
        psutil.Process(worker).wait(timeout=30)
    except psutil.NoSuchProcess:
        pass  # gone already
    except psutil.TimeoutExpired:
        psutil.Process(worker).kill()
        pytest.fail("the worker outlived its launch: an orphan")
