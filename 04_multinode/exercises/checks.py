"""Checks of lesson 04's coding exercises; `course.exercises.check` runs them."""

from course.exercises import load

HOSTLISTS = {
    "node1": ["node1"],
    "node[1-2]": ["node1", "node2"],
    "node[01-03,07],gpu5": ["node01", "node02", "node03", "node07", "gpu5"],
    "gpu5,node[01-03,07]": ["gpu5", "node01", "node02", "node03", "node07"],
    "n[8-11]": ["n8", "n9", "n10", "n11"],
    "n[098-101]": ["n098", "n099", "n100", "n101"],
    "a[1,3,5]": ["a1", "a3", "a5"],
    "rack[1-2]-ib": ["rack1-ib", "rack2-ib"],
    "x[1-2],y[9-10],z": ["x1", "x2", "y9", "y10", "z"],
    "head,worker[0-1]": ["head", "worker0", "worker1"],
    "c[3]": ["c3"],
    "big[1-100]": [f"big{number}" for number in range(1, 101)],
}

LAYOUTS = ([1], [2], [2, 2], [3, 1], [1, 3], [4, 4, 4], [2, 1, 3], [1, 1, 1, 1, 5])


def hostlist(path) -> str:
    exercise = load(path)
    for nodelist, expected in HOSTLISTS.items():
        got = exercise.expand_hostlist(nodelist)
        assert got == expected, f"expand_hostlist({nodelist!r}): expected {expected}, got {got}"
    return f"all {len(HOSTLISTS)} node lists expand as Slurm expands them"


def global_rank(path) -> str:
    exercise = load(path)
    processes = 0
    for layout in LAYOUTS:
        # The job's numbering: node 0's processes first, then node 1's, ...
        expected = [(node, local) for node, count in enumerate(layout) for local in range(count)]
        for rank, (node, local) in enumerate(expected):
            got = exercise.global_rank(node, local, list(layout))
            assert got == rank, (
                f"nodes running {list(layout)} processes: node {node}'s local rank {local} "
                f"is global rank {rank}, got {got}"
            )
            processes += 1
    return f"every one of {processes} processes in {len(LAYOUTS)} layouts got its global rank"
