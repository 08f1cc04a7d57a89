"""The slurm.conf of lesson 04's local cluster (`course.cluster.slurm`): what a real
cluster's configuration says, bent so that every daemon runs on this one machine.

The controller and each node's slurmd listen on 127.0.0.1, each on a free port of its
own; state, pid files and logs go into the cluster's folder, so nothing touches the
machine's own Slurm configuration.
"""

import random
import socket
from pathlib import Path

from common.ports import free_port


def slurm_conf(folder: Path, node_names: list[str], cpus_per_node: int, munge_socket: Path) -> str:
    """The text of slurm.conf for nodes `node_names`, everything kept in `folder`
    (`%n` in a path is the node's name: every slurmd needs files of its own)."""
    controller = socket.gethostname().split(".")[0]  # slurmctld checks its own name
    lines = [
        "ClusterName=course",
        f"SlurmctldHost={controller}(127.0.0.1)",
        f"SlurmctldPort={free_port()}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={munge_socket}",
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
    for name in node_names:
        lines.append(
            f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 "
            f"Port={free_port()} CPUs={cpus_per_node} State=UNKNOWN"
        )
    lines.append(
        f"PartitionName=course Nodes={','.join(node_names)} Default=YES MaxTime=INFINITE State=UP"
    )
    return "\n".join(lines) + "\n"
