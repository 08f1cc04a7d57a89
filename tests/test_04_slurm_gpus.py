"""The lessons' sbatch scripts ask for GPUs, say where training runs (the GPUs PyTorch
sees, else the CPUs), stop in one line when Slurm gave GPUs PyTorch cannot see, and start
every node's torchrun with the checked Python, sbatch's CPUs and the node's own address;
05's refuses a submit folder without main.py. Each runs in bash with Slurm's variables
and stand-ins for scontrol, srun and the Python. (For real, on CPUs: lesson 04's notebook
and tests/test_05_slurm.py.)"""

import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import REPO

SCRIPTS = {
    "multinode.sbatch": (REPO / "04_multinode", ["4", "2"]),
    "sbatch_run.sh": (REPO / "05_mingpt", ["trainer.max_epochs=1"]),
}
# What Slurm's batch step sets, by the way the job asked for 4 GPUs per node:
# SLURM_GPUS_PER_NODE only for --gpus-per-node; SLURM_GPUS_ON_NODE for every way.
ASKED = {
    "--gpus-per-node=4": {"SLURM_GPUS_PER_NODE": "4", "SLURM_GPUS_ON_NODE": "4"},
    "--gres=gpu:a100:4": {"SLURM_GPUS_ON_NODE": "4"},
}


def batch_step(name: str, cwd: Path, path: str = "/usr/bin:/bin", **variables: str):
    """Run slurm/<name> as Slurm's batch step would, with `variables` and PATH `path`."""
    lesson, arguments = SCRIPTS[name]
    environment = {**os.environ, "PATH": path, "SLURM_SUBMIT_DIR": str(lesson), **variables}
    for variable in ("SLURM_JOB_NODELIST", "SLURM_JOB_ID", "SLURM_NNODES", "PYTHON", "DDP_DEVICE"):
        if variable not in variables:
            environment.pop(variable, None)  # any use of them would fail under `set -u`
    command = ["bash", lesson / "slurm" / name, *arguments]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=environment,
                          timeout=120)  # fmt: skip


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_a_python_without_torch_is_named_in_one_line(name, tmp_path):
    result = batch_step(name, tmp_path, PYTHON="false")
    assert (result.returncode, result.stdout) == (2, ""), result
    assert result.stderr == (
        f"{name}: false cannot import torch on {os.uname().nodename}; set PYTHON to the "
        "Python that has PyTorch\n"
    )


def test_a_submit_folder_without_main_py_is_refused_in_one_line(tmp_path):
    """05's script, before any Slurm command."""
    result = batch_step("sbatch_run.sh", tmp_path, SLURM_SUBMIT_DIR=str(tmp_path))
    assert (result.returncode, result.stdout) == (2, ""), result
    assert result.stderr == (
        f"sbatch_run.sh: no main.py in {tmp_path} or {tmp_path}/05_mingpt; submit the job "
        "from the lesson folder or the repository root\n"
    )


# scontrol: node1 and node2 at 10.9.0.1 and .2, listed in two writes as a long list is (a
# reader that stops after the first line ends it with SIGPIPE, and `pipefail` the job).
# srun: says the CPUs per task it passes on, then runs its command as each node. The
# Python: sees $GPUS_SEEN GPUs, and as torchrun reports what it was given.
STAND_INS = {
    "scontrol": """#!/bin/bash
case "$1 $2" in
"show hostnames") echo node1 && sleep 0.2 && echo node2 ;; # a long list: several writes
"show node") echo "NodeName=$3 Arch=x86_64
   NodeAddr=10.9.0.${3#node} NodeHostName=$3" ;;
*) exit 1 ;;
esac
""",
    "srun": """#!/bin/bash
echo "srun: SRUN_CPUS_PER_TASK=${SRUN_CPUS_PER_TASK:-unset}"
while [[ $1 == --* ]]; do shift; done
for node in node1 node2; do SLURMD_NODENAME=$node "$@" || exit; done
""",
    "python": """#!/bin/bash
if [[ $1 == -m && $2 == torch.distributed.run ]]; then
    echo "torchrun on $SLURMD_NODENAME: python=$0 DDP_DEVICE=${DDP_DEVICE:-unset} ${*:3}"
elif [[ $2 == *device_count* ]]; then
    echo "$GPUS_SEEN"
else
    exit 1
fi
""",
}


def run_with_stand_ins(name: str, tmp_path: Path, gpus_seen: int, status=0, **variables: str):
    """The script's run, which must end with exit status `status`."""
    for program, text in STAND_INS.items():
        (tmp_path / program).write_text(text)
        (tmp_path / program).chmod(0o755)
    job = dict(SLURM_JOB_NODELIST="node[1-2]", SLURM_JOB_ID="4242", SLURM_JOB_NUM_NODES="2")
    job |= dict(SLURM_NNODES="2", SLURM_CPUS_PER_TASK="2", RDZV_PORT="29555")
    stand_ins = dict(PYTHON=str(tmp_path / "python"), GPUS_SEEN=str(gpus_seen))
    # The stand-ins come first on PATH; the real python3 must not be needed.
    path = f"{tmp_path}{os.pathsep}/usr/bin{os.pathsep}/bin"
    result = batch_step(name, tmp_path, path, **stand_ins, **job, **variables)
    assert result.returncode == status, result
    return result


@pytest.mark.parametrize("asked", sorted(ASKED))
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_gpus_given_and_not_seen_stop_the_job_in_one_line(name, asked, tmp_path):
    arguments = SCRIPTS[name][1]
    result = run_with_stand_ins(name, tmp_path, gpus_seen=0, status=2, **ASKED[asked])
    assert result.stdout == "", result  # stopped before srun said a word
    assert result.stderr == (
        f"{name}: Slurm gave the job 4 GPU(s) on {os.uname().nodename}, but PyTorch sees "
        f"none; on a CPU-only cluster submit with: sbatch --gpus-per-node=0 slurm/{name} "
        f"{' '.join(arguments)}\n"
    )


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_each_node_gets_its_cpus_the_checked_python_and_its_own_address(name, tmp_path):
    output = run_with_stand_ins(name, tmp_path, gpus_seen=0).stdout
    # sbatch's --cpus-per-task=2 reaches the step: srun does not inherit it by itself.
    assert "srun: SRUN_CPUS_PER_TASK=2" in output, output
    agents = re.findall(r"^torchrun on (\w+): python=(\S+) DDP_DEVICE=(\S+) (.*)$", output, re.M)
    assert [agent[:3] for agent in agents] == [
        ("node1", str(tmp_path / "python"), "unset"),
        ("node2", str(tmp_path / "python"), "unset"),
    ], output
    for node, _, _, arguments in agents:
        # Its own node's address (what c10d's node 0 gives the workers as MASTER_ADDR),
        # before the script's path; the rendezvous at the head node's address.
        assert arguments.startswith(f"--local-addr=10.9.0.{node[-1]} --nnodes=2 "), arguments
        assert "--rdzv_endpoint=10.9.0.1:29555" in arguments
        assert "--rdzv_id=4242 " in arguments
    assert "(CPUs, gloo)" in output
    if name == "sbatch_run.sh":  # two processes per node on CPUs, unless NPROC_PER_NODE
        assert "2 node(s) x 2 process(es)" in output and "--nproc_per_node=2 " in output


@pytest.mark.parametrize("asked", ["--gres=gpu:a100:4", "nothing (GPUs not confined)"])
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_gpus_that_pytorch_sees_train_on_nccl_however_they_were_asked_for(name, asked, tmp_path):
    variables = ASKED.get(asked, {})
    output = run_with_stand_ins(name, tmp_path, gpus_seen=4, **variables).stdout
    where = "4 GPU(s) on the head node, nccl" if name == "multinode.sbatch" else "GPUs, nccl"
    assert f"({where})" in output, output
    assert output.count("DDP_DEVICE=cuda") == 2, output  # every node's workers
    if name == "sbatch_run.sh":  # one process per GPU
        assert "2 node(s) x 4 process(es)" in output and "--nproc_per_node=4 " in output


def sbatch_options(path) -> tuple[list[str], list[str]]:
    """(#SBATCH lines before the first command, those after it, which sbatch ignores)."""
    before, after, commands_began = [], [], False
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#SBATCH"):
            (after if commands_began else before).append(stripped)
        elif stripped and not stripped.startswith("#"):
            commands_began = True
    return before, after


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_the_scripts_ask_for_gpus_per_node_before_their_first_command(name):
    before, after = sbatch_options(SCRIPTS[name][0] / "slurm" / name)
    assert "#SBATCH --gpus-per-node=4" in before and after == [], (before, after)


def test_lesson_04_asks_for_the_early_signal_to_the_batch_script_and_a_requeue():
    """What lessons 03 and 04 say the script asks of Slurm, and the trap acting on it."""
    script = REPO / "04_multinode" / "slurm" / "multinode.sbatch"
    before, _ = sbatch_options(script)
    assert "#SBATCH --signal=B:USR1@120" in before and "#SBATCH --requeue" in before
    trap = next(line for line in script.read_text().splitlines() if line.startswith("trap "))
    assert trap.endswith(" USR1") and 'scontrol requeue "$SLURM_JOB_ID"' in trap
