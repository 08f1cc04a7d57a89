"""A real two-node Slurm cluster on this machine, started for one job and torn down.

Introduced in 04_multinode; used by its notebook and tests. Nothing here changes the
machine's own Slurm configuration (`slurm_conf` writes the cluster's own):

- `why_unavailable()` says in one line why a cluster cannot start here (not Linux,
  not root, Slurm not installed: `python3 -m course.system_packages` installs it);
- `LocalCluster` starts munged, one slurmctld and one slurmd per node, each slurmd
  started as `slurmd -N node1`, `-N node2`, ... on 127.0.0.1 with a port of its own
  (Debian builds Slurm with multiple-slurmd support, which this relies on: see
  `MULTIPLE_SLURMD` in `scontrol show config`). Ports are chosen free at run time;
  configuration, state, logs and the munge key live in one temporary folder. On the
  way out, whatever happened, every daemon and every process of every job is ended
  and the folder is removed;
- `run_sbatch(script, ...)` does it all for one script: start the cluster, show the
  `sbatch` command exactly as it runs it, stream the job's output while it runs, and
  fail if the job fails. The user's side of the cluster (Slurm's commands, jobs) is
  in `slurm_jobs`, which `LocalCluster` inherits from.

The job sees the nodes as a real cluster would (`SLURM_JOB_NODELIST=node[1-2]`,
`srun` starts one task per node through each node's slurmd), but both "nodes" are
this machine, so they share its filesystem and its cores.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from common.output import plain_text
from common.processes import ProcessTree
from course import system_packages
from course.cluster.slurm_conf import slurm_conf
from course.cluster.slurm_jobs import SlurmClient
from course.system_packages import INSTALL_COMMAND, is_root, missing_programs, program


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


class LocalCluster(SlurmClient):
    """Slurm with `nodes` compute nodes, all on 127.0.0.1. Use it as a context
    manager: the daemons start on entry and are all gone on exit. Its commands and
    jobs (`command`, `sbatch`, `job`, `wait`) come from `slurm_jobs.SlurmClient`."""

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
            **plain_text(os.environ),  # jobs inherit it: their output files are read too
            **self._tree.environment(),
            "SLURM_CONF": str(self.folder / "slurm.conf"),
            "PATH": path,
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": "1",
            # The jobs' temporary files (each torchrun agent leaves a torchelastic_*
            # folder) go into the cluster's folder and end with it, as on a cluster
            # whose nodes give every job a temporary folder of its own.
            "TMPDIR": str(self.folder / "tmp"),
        }

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
        (self.folder / "tmp").mkdir()
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
        config = slurm_conf(self.folder, self.node_names, self.cpus_per_node, self.munge_socket)
        (self.folder / "slurm.conf").write_text(config)
        (self.folder / "plugstack.conf").write_text("")  # no SPANK plugins, not the machine's
        (self.folder / "slurmctld").mkdir()
        for name in self.node_names:
            (self.folder / f"spool-{name}").mkdir()

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
            self.cancel_jobs()
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


def run_sbatch(
    script: str | os.PathLike, *args: str, nodes: int = 2, cpus_per_node: int | None = None, **job
) -> str:
    """Start a local cluster, submit `script` from `cwd` (SLURM_SUBMIT_DIR), run it in
    `workdir` (default: `cwd`), show its output, and return it. Variables in `export`
    reach the job's environment. Raises CommandFailed when the job fails. (`cwd`,
    `workdir`, `export` and `timeout` are `SlurmClient.run_job`'s.)

    The lessons' scripts ask for GPUs (`#SBATCH --gpus-per-node=4`); this cluster has
    none, so the job is submitted as on a CPU-only cluster: `--gpus-per-node=0`."""
    with LocalCluster(nodes=nodes, cpus_per_node=cpus_per_node) as cluster:
        return cluster.run_job(script, *args, options=["--gpus-per-node=0"], **job)
