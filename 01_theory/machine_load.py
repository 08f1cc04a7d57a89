"""How busy other programs kept this machine while a measurement ran.

Lesson 01, part 2 (`01_theory_at_scale.ipynb`) asserts its timing checks only when the
machine was quiet: a bound that holds on a quiet machine says nothing about a busy one,
and a bound wide enough for a busy one tells a ring from nothing. Two figures per run:

- the load average (1 minute), read as the run starts: the usual figure, but it counts
  this notebook's own processes too, and reacts within a minute, not at once;
- the CPU time that *other* programs used during the run, per second, in cores: every
  core's busy time (psutil) minus what this process and the processes it started used
  (`resource.getrusage`; torchrun waits for its workers, so theirs is counted in its).
"""

import os
import resource
import time
from contextlib import contextmanager

import psutil

QUIET = 0.25  # at most a quarter of a core used by other programs, on average


def _busy_seconds() -> float:
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


def _our_seconds() -> float:
    ours = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ours.ru_utime + ours.ru_stime + children.ru_utime + children.ru_stime


class LoadRecord:
    """One entry per measured run: (label, load average at its start, others' cores)."""

    def __init__(self):
        self.runs: list[tuple[str, float, float]] = []

    @contextmanager
    def measuring(self, label: str):
        load = os.getloadavg()[0]
        started, busy, ours = time.perf_counter(), _busy_seconds(), _our_seconds()
        yield
        wall = time.perf_counter() - started
        others = (_busy_seconds() - busy) - (_our_seconds() - ours)
        self.runs.append((label, load, max(0.0, others) / wall))

    @property
    def busiest(self) -> float:
        """The most cores other programs used, on average over one run."""
        return max((others for _, _, others in self.runs), default=0.0)

    @property
    def quiet(self) -> bool:
        return self.busiest <= QUIET

    def table(self) -> str:
        lines = [f"{'run':<28} {'load average':>12} {'others, cores':>13}"]
        lines += [f"{label:<28} {load:>12.2f} {others:>13.2f}" for label, load, others in self.runs]
        verdict = "quiet" if self.quiet else "busy"
        lines.append(f"the machine was {verdict}: other programs used at most "
                     f"{self.busiest:.2f} cores in a run (quiet: {QUIET} or less)")  # fmt: skip
        return "\n".join(lines)
