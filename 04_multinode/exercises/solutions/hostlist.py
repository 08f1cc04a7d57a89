"""Solution of exercise 04 · hostlist (the task is in `../hostlist.py`)."""

import re

# One name: a prefix, optionally [ranges] and a suffix, e.g. "node[01-03,07]-ib".
NAME = re.compile(r"([^\[\],]*)(?:\[([\d,\-]+)\]([^\[\],]*))?")


def expand_hostlist(nodelist: str) -> list[str]:
    """Every node name in Slurm's compact `nodelist`, in order, e.g.
    "node[01-03,07],gpu5" -> ["node01", "node02", "node03", "node07", "gpu5"]."""
    hosts = []
    position = 0
    while position < len(nodelist):
        match = NAME.match(nodelist, position)
        prefix, ranges, suffix = match.groups()
        if ranges is None:
            hosts.append(prefix)
        else:
            for part in ranges.split(","):
                first, _, last = part.partition("-")
                width = len(first)  # "01" keeps its leading zero: 01, 02, ...
                for number in range(int(first), int(last or first) + 1):
                    hosts.append(f"{prefix}{number:0{width}d}{suffix}")
        position = match.end() + 1  # past the comma that ends this name
    return hosts
