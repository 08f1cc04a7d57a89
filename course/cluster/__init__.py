"""A cluster on one machine, for 04_multinode (root only).

- `slurm`: a two-node Slurm cluster (slurmctld plus two slurmd) and its jobs.
- `netns`: two hosts with addresses of their own, in Linux network namespaces.
- `apt`: the apt-get helper `course.system_packages` installs their programs with.
"""
