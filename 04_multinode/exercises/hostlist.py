"""Exercise 04 · hostlist: the node names of a Slurm job.

Slurm gives a job its nodes as one compact string, `SLURM_JOB_NODELIST`, for example
`node[01-03,07],gpu5`: nodes node01, node02, node03, node07 and gpu5. The sbatch
scripts of this lesson expand it with `scontrol show hostnames`, which exists only
where Slurm is installed; here you write the expansion yourself.

The rules, as far as this exercise needs them:
- names are separated by commas, but commas *inside* brackets separate numbers;
- `prefix[ranges]suffix` stands for prefix + number + suffix for every number in the
  ranges; a range is `a-b` (a to b, both included) or a single number `a`;
- numbers keep the width of their range's first number: `[01-03]` gives 01, 02, 03,
  and `[8-10]` gives 8, 9, 10;
- a name has at most one bracket group here (real Slurm allows more).

Task: write `expand_hostlist`. The check tries a dozen node lists, with the expected
answer for each.
"""


def expand_hostlist(nodelist: str) -> list[str]:
    """Every node name in Slurm's compact `nodelist`, in order, e.g.
    "node[01-03,07],gpu5" -> ["node01", "node02", "node03", "node07", "gpu5"]."""
    # TODO: split at the commas outside brackets, then expand each name's brackets.
    raise NotImplementedError(f"expand_hostlist({nodelist!r})")
