"""A process that starts late does not fail a short process-group timeout.

Lesson 02's slow_rank.py and uneven_inputs.py demonstrate timeouts of 2-3 seconds.
Joining (init_process_group) waits for every process to arrive, and on a busy machine
one can start seconds after another: a short timeout given to init_process_group would
end the job there, before the demonstration (a flake seen under the suite's load). The
scripts join under the default timeout and give the short one to a group made for it.
Here a `sitecustomize` makes rank 1 start 5 s late, longer than the 2 s timeout.
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
        ("slow_rank.py --delays 0 --timeout 2", "[rank0] all_reduce 1 = 2 (expected 2)"),
        ("uneven_inputs.py --join --timeout 2", "[rank0] finished in"),
    ],
)
def test_a_rank_that_starts_late_joins_under_the_default_timeout(tmp_path, command, finished):
    output = run_with_sitecustomize(
        tmp_path,
        SITECUSTOMIZE,
        f"torchrun --standalone --nproc_per_node=2 {REPO / '02_multigpu' / command}",
        timeout=120,
    )
    assert finished in output, output
