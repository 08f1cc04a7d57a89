"""A rank that starts late does not fail the short process-group timeouts lessons 02 and 04
show (2-5 s): on a busy machine one process can start seconds after another, and joining
waits for all. 02's scripts join under the default timeout and give the short one to a group
of its own; 04's hang scripts line the ranks up first (common.distributed.start_together).
Here rank 1 starts 5 s late under a 2 s timeout; 04's hangs run fixed (`--fixed`), and
every line listed is said exactly once."""

import pytest
from conftest import REPO, run_with_sitecustomize

LATE = 5  # seconds, against a 2 s timeout
SITECUSTOMIZE = f"""
import os
import time

if os.environ.get("RANK") == "1":  # a worker; torchrun's own process has no RANK
    time.sleep({LATE})
"""
HANGS = "04_multinode/hangs"
DONE = ["[rank0] done, 4 steps", "[rank1] done, 4 steps"]


@pytest.mark.parametrize(
    "command, said",
    [
        ("02_multigpu/slow_rank.py --delays 0", ["[rank0] all_reduce 1 = 2 ("]),
        ("02_multigpu/uneven_inputs.py --join", ["[rank0] finished in"]),
        (f"{HANGS}/classic_hangs.py --case rank0_only --fixed", DONE),
        # One order of the collectives, the same on every rank.
        (
            f"{HANGS}/classic_hangs.py --case order --fixed",
            [*DONE, *(f"[rank{r}] step 1 | all-reducing histogram, loss" for r in (0, 1))],
        ),
        (
            f"{HANGS}/one_collective_too_many.py --fixed",
            ["[rank0] epoch 2 | loss 0.3333", "[rank0] done, 3 epochs", "[rank1] done, 3 epochs"],
        ),
    ],
)
def test_a_rank_that_starts_late_joins_under_the_default_timeout(tmp_path, command, said):
    output = run_with_sitecustomize(
        tmp_path,
        SITECUSTOMIZE,
        f"torchrun --standalone --nproc_per_node=2 {REPO / command} --timeout 2",
        timeout=120,
    )
    assert [output.count(line) for line in said] == [1] * len(said), output
