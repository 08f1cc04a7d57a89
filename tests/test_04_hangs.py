"""Lesson 04, part 2, beyond the notebook's check cell: monitored_barrier on the order
case, and how the outcome of PyTorch's flight-record reader is read."""

from conftest import REPO, lesson_module

from common.launch import start

hang_tools = lesson_module("04_multinode/hangs", "hang_tools")

CASES = REPO / "04_multinode" / "hangs" / "classic_hangs.py"


def test_fr_trace_outcomes_are_read_from_the_readers_output():
    as_written = "    pg_name = _pg_guids[(original_pg_name, first_rank)]\nKeyError: ('0', 1)"
    assert hang_tools.fr_trace_as_written(as_written) == "KeyError"
    assert hang_tools.fr_trace_as_written("Collective sequence number: 5 has errors") == "reads"


def test_monitored_barrier_has_nothing_to_say_of_collectives_in_different_orders(tmp_path):
    """Every rank arrives at each barrier; the ranks disagree later, in two all-reduces."""
    command = f"torchrun --standalone --nproc_per_node=2 {CASES} --case order"
    job = start(f"{command} --timeout 3 --monitored_barrier", cwd=tmp_path, quiet=True)
    output = job.wait(timeout=180, expect_failure=True)
    assert "monitoredBarrier" not in output
    # It ended by the collective's timeout, on one rank at least (the other may see the
    # connection closed instead).
    ours = [line for line in output.splitlines() if line.startswith(("[rank0] ", "[rank1] "))]
    assert any("Timed out waiting 3000ms" in line for line in ours), output
