"""Lesson 04's local two-node Slurm cluster: a failed job is a failure, a wrong folder is
refused in one line, the sbatch command is shown as it ran, and no daemon, job process or
folder is left behind, even with a job still running (the lesson's own sbatch training is
checked by its notebook). Slurm: `python3 -m course.system_packages slurm`."""

import re
import subprocess
from pathlib import Path

import pytest
from conftest import REPO, is_gone

from common.launch import CommandFailed
from course.cluster import slurm

SBATCH = REPO / "04_multinode" / "slurm" / "multinode.sbatch"
JOBS = {  # each a job of two nodes, as a learner would write it
    "fail.sbatch": "echo about to fail\nexit 3\n",
    "tmp.sbatch": "srun bash -c 'echo \"tmp=$TMPDIR\"'\n",
    "forever.sbatch": "#SBATCH --ntasks-per-node=1\n"
    "srun bash -c 'echo task pid=$$ on $SLURMD_NODENAME; exec sleep 600'\n",
    "where.sbatch": 'echo "in $PWD, submitted from $SLURM_SUBMIT_DIR, '
    'GREETING=$GREETING, args: $*"\n',
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

        # The command shown carries what sbatch really got (--chdir, --export) and the
        # submit folder: typed into a shell, it submits the very same job.
        submit, work = tmp_path / "submit", tmp_path / "work"
        submit.mkdir()
        work.mkdir()
        where = (tmp_path / "where.sbatch").rename(submit / "where.sbatch")  # from JOBS
        ran = f"in {work}, submitted from {submit}, GREETING=hello, args: one two"
        capsys.readouterr()  # what the jobs before showed
        hello = {"GREETING": "hello"}
        output = cluster.run_job(where, "one two", cwd=submit, workdir=work, export=hello)
        shown = [line for line in capsys.readouterr().out.splitlines() if line.startswith("$ ")]
        assert shown == [
            f"$ cd {submit} && sbatch --parsable --chdir={work} --export=ALL,GREETING=hello "
            "where.sbatch 'one two'"
        ]
        assert ran in output
        command = ["bash", "-c", shown[0].removeprefix("$ ")]
        typed = subprocess.check_output(command, env=cluster.env, text=True, timeout=30)
        _, again = cluster.wait(int(typed), timeout=60, show=False)
        assert ran in again

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
