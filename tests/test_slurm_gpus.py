"""The lessons' sbatch scripts ask for GPUs, and a job that got no usable GPU stops in
one line instead of training on the CPU unnoticed.

A job that asked for GPUs has SLURM_GPUS_PER_NODE set ("4", or "a100:4"). Here no GPU
exists: the scripts are run by bash with that variable, as Slurm's batch step would run
them, and must stop before they reach Slurm's commands. (On the local Slurm cluster the
same scripts run with `--gpus-per-node=0` and say "CPUs, gloo": the notebook of lesson
04 and tests/test_05_slurm.py check that.)
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO

SCRIPTS = {
    "multinode.sbatch": (REPO / "04_multinode", ["4", "2"]),
    "sbatch_run.sh": (REPO / "05_mingpt", ["trainer.max_epochs=1"]),
}


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine where torch sees no GPU")
@pytest.mark.parametrize("requested", ["4", "a100:4"])
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_gpus_asked_for_and_not_seen_stop_the_job_in_one_line(name, requested, tmp_path):
    lesson, arguments = SCRIPTS[name]
    environment = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "SLURM_SUBMIT_DIR": str(lesson),
        "SLURM_GPUS_PER_NODE": requested,
    }
    for variable in ("SLURM_JOB_NODELIST", "SLURM_JOB_ID", "SLURM_NNODES"):
        environment.pop(variable, None)  # any use of them would fail under `set -u`
    result = subprocess.run(
        ["bash", lesson / "slurm" / name, *arguments],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=environment,
        timeout=120,
    )
    assert (result.returncode, result.stdout) == (2, ""), result
    assert result.stderr == (
        f"{name}: the job asked for 4 GPU(s) per node, but PyTorch sees none on "
        f"{os.uname().nodename}; on a CPU-only cluster submit with: sbatch "
        f"--gpus-per-node=0 slurm/{name} {' '.join(arguments)}\n"
    )


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_the_scripts_ask_for_gpus_per_node(name):
    lesson, _ = SCRIPTS[name]
    directives = [
        line
        for line in (lesson / "slurm" / name).read_text().splitlines()
        if line.startswith("#SBATCH")
    ]
    assert "#SBATCH --gpus-per-node=4" in directives


def sbatch_options(path) -> tuple[list[str], list[str]]:
    """(the #SBATCH lines before the script's first command, those after it): sbatch
    reads the first only, and ignores the others without a word."""
    before, after, commands_began = [], [], False
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#SBATCH"):
            (after if commands_began else before).append(stripped)
        elif stripped and not stripped.startswith("#"):
            commands_began = True
    return before, after


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_sbatch_option_comes_before_the_first_command(name):
    lesson, _ = SCRIPTS[name]
    before, after = sbatch_options(next(lesson.glob(f"slurm/{name}")))
    assert before and after == [], after


def test_lesson_04_asks_for_the_early_signal_to_the_batch_script_and_a_requeue():
    """What lesson 03 part 3 and lesson 04 say the script asks of Slurm, and the trap
    that acts on it (the notebook sends the same signal with scancel --batch)."""
    script = REPO / "04_multinode" / "slurm" / "multinode.sbatch"
    before, _ = sbatch_options(script)
    assert "#SBATCH --signal=B:USR1@120" in before and "#SBATCH --requeue" in before
    trap = next(line for line in script.read_text().splitlines() if line.startswith("trap "))
    assert trap.endswith(" USR1") and 'scontrol requeue "$SLURM_JOB_ID"' in trap


def test_sbatch_options_after_a_command_are_found(tmp_path):
    script = tmp_path / "late.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --nodes=2\n\nset -e\n#SBATCH --requeue\n")
    assert sbatch_options(script) == (["#SBATCH --nodes=2"], ["#SBATCH --requeue"])
