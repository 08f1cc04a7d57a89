"""A process that starts late does not fail a short process-group timeout.

Lessons 02 and 04 demonstrate timeouts of 2-5 seconds. Joining (init_process_group)
waits for every process to arrive, and on a busy machine one can start seconds after
another: a short timeout given to init_process_group would end the job there, before
the demonstration (a flake seen under the suite's load). Lesson 02's scripts join under
the default timeout and give the short one to a group made for it; lesson 04's hang
scripts keep one group (their flight records and DETAIL's checks are read as one), and
line the ranks up first (common.distributed.start_together). Here a `sitecustomize`
makes rank 1 start 5 s late, longer than the 2 s timeout.
"""

import pytest
from conftest import REPO, run_with_sitecustomize

LATE = 5  # seconds, against a 2 s timeout
SITECUSTOMIZE = f"""
import os
import time

if os.environ.get("RANK") == "1":  # a worker; torchrun's own process has no RANK
    time.sleep({LATE})
"""


@pytest.mark.parametrize(
    "command, finished",
    [
        ("02_multigpu/slow_rank.py --delays 0 --timeout 2", "[rank0] all_reduce 1 = 2 ("),
        ("02_multigpu/uneven_inputs.py --join --timeout 2", "[rank0] finished in"),
        ("04_multinode/hangs/classic_hangs.py --case order --fixed --timeout 2", "] done, "),
        ("04_multinode/hangs/one_collective_too_many.py --fixed --timeout 2", "] done, 3 epochs"),
    ],
)
def test_a_rank_that_starts_late_joins_under_the_default_timeout(tmp_path, command, finished):
    output = run_with_sitecustomize(
        tmp_path,
        SITECUSTOMIZE,
        f"torchrun --standalone --nproc_per_node=2 {REPO / command}",
        timeout=120,
    )
    assert finished in output, output
