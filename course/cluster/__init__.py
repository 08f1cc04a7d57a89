"""A cluster on one machine, for 04_multinode (root only).

- `slurm`: a two-node Slurm cluster (munged, slurmctld, one slurmd per node) started
  and stopped, and `run_sbatch`, which runs one script on it from start to end;
  - `slurm_conf`: the slurm.conf that puts all its daemons on 127.0.0.1;
  - `slurm_jobs`: its user's side: Slurm's commands, jobs submitted (the sbatch
    command shown as it runs) and their output shown while they run.
- `netns`: two hosts with addresses of their own, in Linux network namespaces.
"""
