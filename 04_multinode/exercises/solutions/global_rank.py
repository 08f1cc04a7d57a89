"""Solution of exercise 04 · global_rank (the task is in `../global_rank.py`)."""


def global_rank(node_rank: int, local_rank: int, nproc_per_node: list[int]) -> int:
    """The global rank of process `local_rank` of node `node_rank`, where node i runs
    `nproc_per_node[i]` processes. With [3, 1]: node 1's process 0 is global rank 3."""
    return sum(nproc_per_node[:node_rank]) + local_rank
