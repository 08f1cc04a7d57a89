"""Lesson 00: the hello-world job, its launch errors, and its notebook failing when
the script fails."""

import shutil
import subprocess

import pytest
from conftest import PYTHON, REPO

from common.launch import run

LESSON = REPO / "00_intro"
HELLO = LESSON / "hello_torchrun.py"


@pytest.mark.parametrize("world_size", [2, 3])
def test_every_rank_reports_and_all_reduce_sums_the_ranks(world_size, tmp_path):
    output = run(
        f"torchrun --standalone --nproc_per_node={world_size} {HELLO}", cwd=tmp_path, quiet=True
    )
    expected = world_size * (world_size - 1) // 2
    for rank in range(world_size):
        assert f"[rank{rank}] pid=" in output
        assert f"rank={rank} local_rank={rank} world_size={world_size} backend=gloo" in output
        assert f"[rank{rank}] all_reduce(SUM) of the ranks = {expected} (expected" in output


def test_plain_python_says_how_to_launch_it(tmp_path):
    result = subprocess.run([PYTHON, HELLO], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert "must be started by torchrun" in result.stderr
    assert (
        "launch it as: torchrun --standalone --nproc_per_node=2 hello_torchrun.py" in result.stderr
    )


def test_bad_arguments_are_one_line(tmp_path):
    result = subprocess.run([PYTHON, HELLO, "--epochs", "3"], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "unrecognized arguments: --epochs 3; launch it as: torchrun" in result.stderr


def test_the_notebook_fails_when_its_script_fails(tmp_path):
    lesson = tmp_path / "00_intro"
    shutil.copytree(LESSON, lesson, ignore=shutil.ignore_patterns("*.pt", "__pycache__"))
    script = lesson / "hello_torchrun.py"
    script.write_text(
        script.read_text().replace(
            "    dist.destroy_process_group()\n", "    raise SystemExit(7)\n"
        )
    )
    result = subprocess.run(
        [
            PYTHON,
            "-m",
            "pytest",
            "--nbmake",
            "--nbmake-timeout=120",
            "-p",
            "no:xdist",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            str(lesson / "00_intro.ipynb"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    assert result.returncode == 1, result.stdout[-3000:]
    assert "CommandFailed" in result.stdout
    assert "exited with status 1" in result.stdout  # torchrun reports the worker's failure
