"""Checks of lesson 00's coding exercises; `course.exercises.check` runs them."""

import os

from course.exercises import run_in_world


def _pid_and_answer(exercise):
    """Runs in each process of the world: its own pid, and what the learner returned."""
    return os.getpid(), exercise.gather_pids()


def gather_pids(path) -> str:
    world_size = 2
    results = run_in_world(path, (__file__, "_pid_and_answer"), world_size)
    pids = [pid for pid, _ in results]
    for rank, (_, answer) in enumerate(results):
        assert isinstance(answer, list) and all(isinstance(p, int) for p in answer), (
            f"rank {rank}: gather_pids should return a list of ints, got {answer!r}"
        )
        # run_in_world starts the last rank first, so `pids` is rarely in increasing
        # order, and a sorted answer shows.
        assert answer == pids or sorted(answer) != sorted(pids), (
            f"rank {rank}: got the pids of ranks 0..{world_size - 1} in another order, "
            f"{answer}; expected {pids}, rank 0's first (all_gather fills its list in rank "
            "order: keep that order)"
        )
        assert answer == pids, (
            f"rank {rank}: expected the pids of ranks 0..{world_size - 1}, {pids}, got {answer}"
        )
    return f"both ranks of a 2-process world returned the pids of both processes, {pids}"
