"""A real two-node Slurm cluster on this machine, started for one job and torn down.

Introduced in 04_multinode; used by its notebook and tests. Nothing here changes the
machine's own Slurm configuration:

- `why_unavailable()` says in one line why a cluster cannot start here (not Linux,
  not root, Slurm not installed: `python3 -m course.system_packages` installs it);
- `LocalCluster` starts munged, one slurmctld and one slurmd per node, each slurmd
  started as `slurmd -N node1`, `-N node2`, ... on 127.0.0.1 with a port of its own
  (Debian builds Slurm with multiple-slurmd support, which this relies on: see
  `MULTIPLE_SLURMD` in `scontrol show config`). Ports are chosen free at run time;
  configuration, state, logs and the munge key live in one temporary folder. On the
  way out, whatever happened, every daemon and every process of every job is ended
  and the folder is removed;
- `run_sbatch(script, ...)` does it all for one script: start the cluster, `sbatch`,
  stream the job's output while it runs, and fail if the job fails.

The job sees the nodes as a real cluster would (`SLURM_JOB_NODELIST=node[1-2]`,
`srun` starts one task per node through each node's slurmd), but both "nodes" are
this machine, so they share its filesystem and its cores.
"""

import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from common.launch import CommandFailed, CommandTimedOut
from common.ports import free_port
from common.processes import ProcessTree
from course import system_packages
from course.system_packages import INSTALL_COMMAND, missing_programs, program

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


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def why_unavailable() -> str | None:
    """None when a local cluster can start here; else one line saying why not."""
    if not sys.platform.startswith("linux"):
        return f"a local Slurm cluster needs Linux (this is {sys.platform})"
    if not is_root():
        return (
            "a local Slurm cluster needs root (slurmd starts job steps as the job's "
            "user); run as root, e.g. in a container, to see it"
        )
    missing = missing_programs("slurm")
    if missing:
        return (
            f"Slurm is not installed ({', '.join(missing)} not found); install it with "
            f"`{INSTALL_COMMAND} slurm`"
        )
    return None


class LocalCluster:
    """Slurm with `nodes` compute nodes, all on 127.0.0.1. Use it as a context
    manager: the daemons start on entry and are all gone on exit."""

    def __init__(self, nodes: int = 2, cpus_per_node: int | None = None, startup_timeout=60):
        self.node_names = [f"node{i}" for i in range(1, nodes + 1)]
        self.cpus_per_node = cpus_per_node or max(2, os.cpu_count() or 1)
        self.startup_timeout = startup_timeout
        self.folder: Path | None = None
        self._tree = ProcessTree()  # marks the daemons, and every job process they start
        self._daemons: dict[str, subprocess.Popen] = {}

    # -- the environment every Slurm command and every job runs with --------------
    @property
    def env(self) -> dict[str, str]:
        bin_folder = str(Path(sys.executable).parent)  # torchrun and python of this venv
        path = os.pathsep.join(
            [bin_folder, os.environ.get("PATH", ""), *system_packages.SYSTEM_FOLDERS]
        )
        return {
            **os.environ,
            **self._tree.environment(),
            "SLURM_CONF": str(self.folder / "slurm.conf"),
            "PATH": path,
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": "1",
        }

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

    # -- start and stop ------------------------------------------------------------
    def __enter__(self) -> "LocalCluster":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def start(self) -> None:
        reason = why_unavailable()
        if reason:
            raise RuntimeError(reason)
        self.folder = Path(tempfile.mkdtemp(prefix="ddp-slurm-"))
        started = time.monotonic()
        self._start_munge()
        self._write_config()
        # -c: a clean start, no state from an earlier cluster; -i: ignore missing state.
        self._spawn("slurmctld", ["slurmctld", "-D", "-c", "-i"])
        self._until(lambda: "is UP" in self._quiet("scontrol", "ping"), "slurmctld to answer")
        for name in self.node_names:
            # -N: this slurmd serves the node of that name (its port comes from slurm.conf).
            self._spawn(f"slurmd-{name}", ["slurmd", "-D", "-N", name])
        self._until(self._all_idle, f"nodes {', '.join(self.node_names)} to be idle")
        print(
            f"local Slurm cluster up in {time.monotonic() - started:.1f} s: slurmctld and "
            f"{len(self.node_names)} slurmd ({', '.join(self.node_names)}) on 127.0.0.1, "
            f"state in {self.folder}",
            flush=True,
        )

    def _start_munge(self) -> None:
        munge_folder = self.folder / "munge"
        munge_folder.mkdir(mode=0o700)
        key = munge_folder / "munge.key"
        subprocess.run(
            [program("mungekey"), "--create", f"--keyfile={key}"], check=True, env=self.env
        )
        self.munge_socket = munge_folder / "munge.socket"
        self._spawn(
            "munged",
            [
                "munged",
                "--foreground",
                "--force",  # root, and a socket folder others cannot reach: fine here
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={munge_folder / 'munged.pid'}",
                f"--log-file={munge_folder / 'munged.log'}",
                f"--seed-file={munge_folder / 'munged.seed'}",
            ],
        )
        self._until(self.munge_socket.exists, "munged to open its socket")

    def _write_config(self) -> None:
        folder = self.folder
        controller = socket.gethostname().split(".")[0]  # slurmctld checks its own name
        lines = [
            "ClusterName=course",
            f"SlurmctldHost={controller}(127.0.0.1)",
            f"SlurmctldPort={free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={folder / 'slurmctld'}",
            f"SlurmdSpoolDir={folder / 'spool-%n'}",
            f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
            f"SlurmdPidFile={folder / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={folder / 'slurmctld.log'}",
            f"SlurmdLogFile={folder / 'slurmd-%n.log'}",
            f"PlugStackConfig={folder / 'plugstack.conf'}",
            # No cgroups: processes are tracked by their parent ids, tasks not pinned.
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SwitchType=switch/none",
            "MpiDefault=none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/builtin",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "ReturnToService=2",
            # Every cluster would number its jobs from 1, and a job's output file
            # (`%x-%j.out`) could be an old one of the same name: start somewhere else.
            f"FirstJobId={random.randint(10_000, 9_999_999)}",
            # Every node claims the machine's CPUs; trust the config, not the hardware.
            "SlurmdParameters=config_overrides",
            "KillWait=5",
        ]
        for name in self.node_names:
            lines.append(
                f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 "
                f"Port={free_port()} CPUs={self.cpus_per_node} State=UNKNOWN"
            )
        lines.append(
            f"PartitionName=course Nodes={','.join(self.node_names)} Default=YES "
            "MaxTime=INFINITE State=UP"
        )
        (folder / "slurm.conf").write_text("\n".join(lines) + "\n")
        (folder / "plugstack.conf").write_text("")
        (folder / "slurmctld").mkdir()
        for name in self.node_names:
            (folder / f"spool-{name}").mkdir()

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.folder / f"{name}.out", "w")
        self._daemons[name] = subprocess.Popen(
            [program(argv[0]), *argv[1:]],
            cwd=self.folder,  # and so the job steps' (see _kill_step_daemons)
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()

    def _quiet(self, *argv: str) -> str:
        try:
            return self.command(*argv, timeout=10)
        except (CommandFailed, subprocess.TimeoutExpired):
            return ""

    def _all_idle(self) -> bool:
        states = dict(
            line.split()
            for line in self._quiet("sinfo", "--noheader", "--Node", "--format=%N %t").splitlines()
            if line.strip()
        )
        return all(states.get(name) == "idle" for name in self.node_names)

    def _until(self, condition, what: str) -> None:
        """Wait for `condition()`, failing early with the daemons' logs if one died."""
        deadline = time.monotonic() + self.startup_timeout
        while not condition():
            dead = [name for name, proc in self._daemons.items() if proc.poll() is not None]
            if dead or time.monotonic() > deadline:
                problem = f"{', '.join(dead)} exited" if dead else "timed out"
                raise RuntimeError(
                    f"local Slurm cluster: waiting for {what}: {problem}\n{self.logs()}"
                )
            time.sleep(0.1)  # polling a daemon's state; nothing to be notified by

    def logs(self, lines: int = 15) -> str:
        """The last lines of every daemon's log, for error messages."""
        if self.folder is None:
            return ""
        parts = []
        for path in sorted(self.folder.glob("*.log")) + sorted(self.folder.glob("*.out")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            if tail:
                parts.append(f"--- {path.name}\n" + "\n".join(tail))
        return "\n".join(parts)

    def pids(self) -> list[int]:
        """Every live process of this cluster: daemons, job steps and job tasks."""
        return [proc.pid for proc in self._tree.members()] + self.step_daemon_pids()

    def stop(self) -> None:
        """End every job, every daemon and every job process, then remove the folder."""
        if self._daemons.get("slurmctld") is not None and self._daemons["slurmctld"].poll() is None:
            self._cancel_jobs()
        # slurmd first (it stops job steps it owns), the controller, then munge.
        order = [name for name in self._daemons if name.startswith("slurmd")]
        order += ["slurmctld", "munged"]
        for name in order:
            proc = self._daemons.get(name)
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self._tree.kill()  # job tasks: they carry our marker in their environment
        self._kill_step_daemons()
        self._daemons.clear()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def _cancel_jobs(self) -> None:
        """Cancel what is still queued or running, and wait (briefly) until it is gone."""
        jobs = self._quiet("squeue", "--noheader", "--format=%i").split()
        if not jobs:
            return
        self._quiet("scancel", *jobs)
        deadline = time.monotonic() + 15
        while self._quiet("squeue", "--noheader", "--format=%i").split():
            if time.monotonic() > deadline:
                return  # what is left is killed below
            time.sleep(0.1)  # polling the controller until the jobs are gone

    def _kill_step_daemons(self) -> None:
        """slurmstepd (one per job step) outlives slurmd, ignores SIGTERM and wipes its
        environment, so our marker cannot find it: its working folder, inherited from
        slurmd, is ours."""
        for pid in self.step_daemon_pids():
            try:
                proc = psutil.Process(pid)
                proc.kill()
                proc.wait(timeout=10)
            except (psutil.NoSuchProcess, psutil.TimeoutExpired):
                pass

    def step_daemon_pids(self) -> list[int]:
        """The live slurmstepd processes of this cluster's jobs."""
        if self.folder is None:
            return []
        found = []
        for proc in psutil.process_iter(["name", "cwd", "status"]):
            info = proc.info
            if (
                info["name"] == "slurmstepd"
                and info["status"] != psutil.STATUS_ZOMBIE
                and info["cwd"] is not None
                and Path(info["cwd"]).is_relative_to(self.folder)
            ):
                found.append(proc.pid)
        return found

    # -- jobs ----------------------------------------------------------------------
    def sbatch(self, script: str | os.PathLike, *args: str, cwd=None, options=()) -> int:
        """Submit `script` with sbatch from folder `cwd`; returns the job id."""
        output = self.command("sbatch", "--parsable", *options, str(script), *args, cwd=cwd)
        return int(output.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        """`scontrol show job` as a dict (JobState, ExitCode, StdOut, ...)."""
        text = self.command("scontrol", "show", "job", "--oneliner", str(job_id))
        return dict(re.findall(r"(\w+)=(\S*)", text))

    def wait(self, job_id: int, timeout: float, show: bool = True) -> tuple[dict, str]:
        """Wait for the job to end, streaming its output file; returns (job, output)."""
        deadline = time.monotonic() + timeout
        shown = 0
        while True:
            job = self.job(job_id)
            out = Path(job.get("StdOut", ""))
            started = job.get("JobState") not in ("PENDING", "CONFIGURING")
            text = out.read_text(errors="replace") if started and out.is_file() else ""
            if show and len(text) > shown:
                complete = text[shown:].rpartition("\n")[0]  # whole lines only
                if complete:
                    sys.stdout.write(complete + "\n")
                    sys.stdout.flush()
                    shown += len(complete) + 1
            if job.get("JobState") in FINAL_STATES:
                if show and len(text) > shown:
                    sys.stdout.write(text[shown:] + "\n")
                return job, text
            if time.monotonic() > deadline:
                self._quiet("scancel", str(job_id))
                raise CommandTimedOut(
                    f"Slurm job {job_id} did not end within {timeout:g} s; cancelled", text
                )
            time.sleep(0.2)  # polling the controller for the job's state


def run_sbatch(
    script: str | os.PathLike,
    *args: str,
    cwd: str | os.PathLike,
    workdir: str | os.PathLike | None = None,
    export: dict[str, str] | None = None,
    timeout: float = 180,
    nodes: int = 2,
    cpus_per_node: int | None = None,
) -> str:
    """Start a local cluster, submit `script` from `cwd` (SLURM_SUBMIT_DIR), run it in
    `workdir` (default: `cwd`), show its output, and return it. Variables in `export`
    reach the job's environment. Raises CommandFailed when the job fails."""
    options = [f"--chdir={workdir or cwd}"]
    if export:
        # ALL: the job also gets this environment, the venv's torchrun on PATH included.
        options.append("--export=" + ",".join(["ALL", *(f"{k}={v}" for k, v in export.items())]))
    with LocalCluster(nodes=nodes, cpus_per_node=cpus_per_node) as cluster:
        shown = " ".join([Path(script).name, *args])
        print(f"$ sbatch {shown}", flush=True)
        job_id = cluster.sbatch(script, *args, cwd=cwd, options=options)
        job, output = cluster.wait(job_id, timeout)
        state, exit_code = job.get("JobState"), job.get("ExitCode")
        print(f"job {job_id}: {state}, exit code {exit_code}, nodes {job.get('NodeList')}")
        if state != "COMPLETED":
            raise CommandFailed(
                f"Slurm job {job_id} ended {state} (exit code {exit_code})\n{cluster.logs()}",
                output,
            )
    return output
