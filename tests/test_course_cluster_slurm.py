"""Lesson 04: a real two-node Slurm cluster on this machine reports a failed job as a
failure, refuses a wrong folder in one line, shows the sbatch command exactly as it
ran it, and leaves no daemon, job process or folder behind, even when a job is still
running at the end. (The lesson's sbatch script training on two nodes is run and
checked by the notebook itself.)

Slurm comes from `python3 -m course.system_packages` (CI runs it as root first);
without it these tests skip and say why, or fail under COURSE_STRICT=1."""

import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import REPO, is_gone

from common.launch import CommandFailed
from course import system_packages
from course.cluster import slurm

SBATCH = REPO / "04_multinode" / "slurm" / "multinode.sbatch"
JOBS = {  # each a job of two nodes, as a learner would write it
    "fail.sbatch": "echo about to fail\nexit 3\n",
    "tmp.sbatch": "srun bash -c 'echo \"tmp=$TMPDIR\"'\n",
    "forever.sbatch": "#SBATCH --ntasks-per-node=1\n"
    "srun bash -c 'echo task pid=$$ on $SLURMD_NODENAME; exec sleep 600'\n",
}


def test_one_cluster_runs_jobs_as_shown_and_leaves_nothing_behind(
    slurm_installed, tmp_path, capsys
):
    for name, text in JOBS.items():
        (tmp_path / name).write_text(f"#!/bin/bash\n#SBATCH --nodes=2\n{text}")
    with slurm.LocalCluster() as cluster:
        with pytest.raises(CommandFailed, match=r"ended FAILED \(exit code 3:0\)") as failure:
            cluster.run_job("fail.sbatch", cwd=tmp_path, timeout=60)
        assert "about to fail" in failure.value.output
        with pytest.raises(CommandFailed) as failure:  # as run_sbatch submits it
            cluster.run_job(SBATCH, cwd=tmp_path, timeout=60, options=["--gpus-per-node=0"])
        assert f"{tmp_path / 'multinode.py'} not found; submit from the lesson folder" in (
            failure.value.output
        )

        # torchrun leaves a torchelastic_* folder in $TMPDIR per agent: on this machine's
        # cluster it must be the cluster's own folder, removed with it, not /tmp.
        output = cluster.run_job("tmp.sbatch", cwd=tmp_path, timeout=60)
        folders = {Path(line.removeprefix("tmp=")) for line in output.split() if "tmp=" in line}
        assert len(folders) == 1, output  # both nodes' tasks, one folder
        (job_tmp,) = folders
        assert job_tmp.name == "tmp" and job_tmp.parent.name.startswith("ddp-slurm-"), output

        shown_as_ran(cluster, tmp_path, capsys)

        folder = cluster.folder
        daemons = cluster.pids()
        assert len(daemons) >= 4  # munged, slurmctld, two slurmd (and slurmctld's helper)
        job_id = cluster.sbatch("forever.sbatch", cwd=tmp_path, options=[f"--chdir={tmp_path}"])
        tasks = []
        for node in cluster.node_names:  # each task says its pid, then runs on
            line = cluster.wait_for_line(job_id, f"^task pid=.* on {node}$", timeout=60)
            tasks.append(int(re.search(r"pid=(\d+)", line)[1]))
        assert cluster.job(job_id)["JobState"] == "RUNNING"
        in_flight = cluster.pids()
        assert set(tasks) <= set(in_flight)
        # slurmstepd: the batch step, and the srun step on each node.
        assert len(cluster.step_daemon_pids()) >= 3
    assert not folder.exists() and not job_tmp.exists()
    assert all(is_gone(pid) for pid in in_flight), [p for p in in_flight if not is_gone(p)]


def shown_as_ran(cluster, tmp_path, capsys) -> None:
    """What run_job shows carries the options sbatch really got (--chdir, --export) and
    the submit folder: typed into a shell, the line submits the very same job."""
    submit, work = tmp_path / "submit", tmp_path / "work"
    submit.mkdir()
    work.mkdir()
    (submit / "where.sbatch").write_text(
        "#!/bin/bash\n#SBATCH --nodes=1\n"
        'echo "in $PWD, submitted from $SLURM_SUBMIT_DIR, GREETING=$GREETING, args: $*"\n'
    )
    ran = f"in {work}, submitted from {submit}, GREETING=hello, args: one two"
    capsys.readouterr()  # what the jobs before showed
    output = cluster.run_job(
        submit / "where.sbatch", "one two", cwd=submit, workdir=work, export={"GREETING": "hello"}
    )
    shown = [line for line in capsys.readouterr().out.splitlines() if line.startswith("$ ")]
    assert shown == [
        f"$ cd {submit} && sbatch --parsable --chdir={work} --export=ALL,GREETING=hello "
        "where.sbatch 'one two'"
    ]
    assert ran in output
    typed = subprocess.run(
        ["bash", "-c", shown[0].removeprefix("$ ")],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    _, again = cluster.wait(int(typed.stdout), timeout=60, show=False)
    assert ran in again


def test_without_root_it_says_why(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    reason = slurm.why_unavailable()
    assert reason.startswith("a local Slurm cluster needs root")


def test_missing_programs_are_named(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(system_packages, "program", lambda name: None if name == "slurmd" else "/x")
    assert slurm.why_unavailable() == (
        "Slurm is not installed (slurmd not found); install it with "
        "`sudo python3 -m course.system_packages slurm`"
    )
