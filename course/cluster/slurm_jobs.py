"""Jobs on lesson 04's local Slurm cluster, as its user sees them: Slurm's commands, a
script submitted with sbatch, its output shown while it runs, and how it ended.

Introduced in 04_multinode. `slurm.LocalCluster` inherits `SlurmClient` from here and
adds what its daemons need (`course.cluster.slurm`); `slurm.run_sbatch` starts one and
calls `run_job`, which prints the sbatch command exactly as it runs, options included
and paths short (`as_typed`), so that a learner can copy it. A job's output file is
shown as it grows with `common.output.LineStream`, the helper that shows a command's output.
"""

import os
import re
import shlex
import subprocess
import time
from pathlib import Path

from common.launch import CommandFailed, CommandTimedOut
from common.output import LineStream
from course.system_packages import program

FINAL_STATES = (
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "PREEMPTED",
)


def _absolute(path: str | os.PathLike) -> Path:
    return Path(os.path.abspath(path))  # not resolve(): keep the path as the user wrote it


def _inside(path: str | os.PathLike, folder: str | os.PathLike) -> str:
    """`path` (a relative one starts from `folder`) for a command that runs in `folder`:
    relative when it is inside it, so that the command shown stays short."""
    path, folder = _absolute(Path(folder, path)), _absolute(folder)
    return str(path.relative_to(folder) if path.is_relative_to(folder) else path)


def as_typed(argv: list[str], cwd: str | os.PathLike | None = None) -> str:
    """The shell line that runs `argv` in folder `cwd`: `cd` there first, unless it is
    the current folder."""
    line = shlex.join(argv)
    if cwd is None or _absolute(cwd) == Path.cwd():
        return line
    return f"cd {shlex.quote(_inside(cwd, Path.cwd()))} && {line}"


class SlurmClient:
    """Slurm's commands, run the way the cluster's user runs them. The cluster that
    inherits this class provides `env` (SLURM_CONF, PATH) and `logs()`."""

    env: dict[str, str]

    def command(self, *argv: str, timeout: float = 30, cwd=None) -> str:
        """Run a Slurm client command (scontrol, sinfo, ...) and return its output."""
        result = subprocess.run(
            [program(argv[0]) or argv[0], *argv[1:]],
            env=self.env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if result.returncode != 0:
            raise CommandFailed(
                f"`{' '.join(argv)}` exited with status {result.returncode}: "
                f"{result.stderr.strip()}",
                result.stdout + result.stderr,
            )
        return result.stdout

    def _quiet(self, *argv: str) -> str:
        """`command`, or "" if it fails: for questions asked while daemons come and go."""
        try:
            return self.command(*argv, timeout=10)
        except (CommandFailed, subprocess.TimeoutExpired):
            return ""

    def sbatch(
        self, script: str | os.PathLike, *args: str, cwd=None, options=(), show=False
    ) -> int:
        """Submit `script` with sbatch from folder `cwd` (the job's SLURM_SUBMIT_DIR);
        returns the job id. `show` prints the command first, exactly as it runs."""
        argv = ["sbatch", "--parsable", *options, str(script), *args]
        if show:
            print(f"$ {as_typed(argv, cwd)}", flush=True)
        output = self.command(*argv, cwd=cwd)
        return int(output.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        """`scontrol show job` as a dict (JobState, ExitCode, StdOut, ...)."""
        text = self.command("scontrol", "show", "job", "--oneliner", str(job_id))
        return dict(re.findall(r"(\w+)=(\S*)", text))

    def _polled(self, job_id: int, timeout: float):
        """The job (`job`) again and again until `timeout` seconds have passed."""
        deadline = time.monotonic() + timeout
        while True:
            yield self.job(job_id)
            if time.monotonic() > deadline:
                return
            time.sleep(0.2)  # polling the controller: Slurm tells no one when a job ends

    @staticmethod
    def _output(job: dict[str, str]) -> str:
        """What the job's output file holds so far ("" before the job starts: a file of
        that name can then only be an old one)."""
        out = Path(job.get("StdOut", ""))
        started = job.get("JobState") not in ("PENDING", "CONFIGURING")
        return out.read_text(errors="replace") if started and out.is_file() else ""

    def wait(self, job_id: int, timeout: float, show: bool = True) -> tuple[dict, str]:
        """Wait for the job to end, showing its output file as it grows; returns
        (job, output)."""
        stream, read = LineStream(quiet=not show), 0
        for job in self._polled(job_id, timeout):
            if text := self._output(job):
                stream.add(text[read:])
                read = len(text)
            if job.get("JobState") in FINAL_STATES:
                stream.end()
                return job, stream.text
        self._quiet("scancel", str(job_id))
        raise CommandTimedOut(
            f"Slurm job {job_id} did not end within {timeout:g} s; cancelled", stream.text
        )

    def wait_for_line(self, job_id: int, pattern: str, timeout: float) -> str:
        """Wait until a line of the job's output file matches the regular expression
        `pattern`, and return that line (the job goes on running). While the job runs its
        file is read every 10 ms, the controller asked every 0.2 s: a tiny job's epoch
        can end in less than one question to the controller takes."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        job, asked = self.job(job_id), time.monotonic()
        while job.get("JobState") not in FINAL_STATES and time.monotonic() < deadline:
            lines = self._output(job).splitlines() if job.get("JobState") == "RUNNING" else []
            found = [line for line in lines if regex.search(line)]
            if found:
                return found[0]
            time.sleep(0.01)
            if time.monotonic() - asked > 0.2:
                job, asked = self.job(job_id), time.monotonic()
        raise CommandTimedOut(
            f"Slurm job {job_id} printed no line matching {pattern!r} "
            f"(state {job.get('JobState')})",
            self._output(job),
        )

    def wait_for_state(self, job_id: int, state: str, timeout: float) -> dict[str, str]:
        """Wait until the job is in `state` (PENDING again after a requeue, ...)."""
        for job in self._polled(job_id, timeout):
            if job.get("JobState") == state:
                return job
        raise CommandTimedOut(
            f"Slurm job {job_id} is {job.get('JobState')}, not {state}, after {timeout:g}s", ""
        )

    def cancel_jobs(self) -> None:
        """Cancel what is still queued or running, and wait (briefly) until it is gone."""
        jobs = self._quiet("squeue", "--noheader", "--format=%i").split()
        if not jobs:
            return
        self._quiet("scancel", *jobs)
        deadline = time.monotonic() + 15
        while self._quiet("squeue", "--noheader", "--format=%i").split():
            if time.monotonic() > deadline:
                return  # the cluster kills what is left when it stops
            time.sleep(0.1)  # polling the controller until the jobs are gone

    def run_job(
        self,
        script: str | os.PathLike,
        *args: str,
        cwd: str | os.PathLike,
        workdir: str | os.PathLike | None = None,
        export: dict[str, str] | None = None,
        timeout: float = 180,
        options: list[str] | None = None,
    ) -> str:
        """Submit `script` from `cwd`, run it in `workdir`, show its output and return
        it: see `slurm.run_sbatch`. `options` go to sbatch first."""
        options = list(options or [])
        if workdir is not None:  # without it, the job runs in the folder sbatch ran in
            options.append(f"--chdir={_inside(workdir, cwd)}")
        if export:
            # ALL: the job also gets this environment, the venv's torchrun on PATH included.
            names = [f"{name}={value}" for name, value in export.items()]
            options.append("--export=" + ",".join(["ALL", *names]))
        job_id = self.sbatch(_inside(script, cwd), *args, cwd=cwd, options=options, show=True)
        job, output = self.wait(job_id, timeout)
        state, exit_code = job.get("JobState"), job.get("ExitCode")
        print(f"job {job_id}: {state}, exit code {exit_code}, nodes {job.get('NodeList')}")
        if state != "COMPLETED":
            raise CommandFailed(
                f"Slurm job {job_id} ended {state} (exit code {exit_code})\n{self.logs()}",
                output,
            )
        return output
