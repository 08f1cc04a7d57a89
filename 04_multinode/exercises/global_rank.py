"""Exercise 04 · global_rank: numbering the processes of several nodes.

torchrun gives each worker a *local* rank, its number on its node (it picks the
device), and a *global* rank, its number in the whole job (it names the process, and
rank 0 saves). Nodes are numbered by their *node rank*; every process of node 0 comes
before every process of node 1, and so on. Nodes may run different numbers of
processes, as in the lesson's run with 2 processes on one node and 1 on the other.

Task: write `global_rank`. The check tries several layouts, with equal and unequal
numbers of processes per node, and compares every process's answer with the job's
numbering written out in full.
"""


def global_rank(node_rank: int, local_rank: int, nproc_per_node: list[int]) -> int:
    """The global rank of process `local_rank` of node `node_rank`, where node i runs
    `nproc_per_node[i]` processes. With [3, 1]: node 1's process 0 is global rank 3."""
    # TODO: count the processes of the nodes before this one.
    raise NotImplementedError(f"global_rank({node_rank}, {local_rank}, {nproc_per_node})")
