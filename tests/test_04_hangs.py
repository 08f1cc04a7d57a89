"""Lesson 04, part 2: what the notebook's check cell does not assert on its own runs (it
asserts every hang, what each tool says of it, py-spy's stacks, and what DDP under
DETAIL does for this release): monitored_barrier on the order case, and how the
outcome of PyTorch's flight-record reader is read. (The two bugs fixed, each job
ending: tests/test_scripts_late_start.py, with a rank that starts late.)"""

from conftest import REPO, lesson_module

from common.launch import start

hang_tools = lesson_module("04_multinode/hangs", "hang_tools")

CASES = REPO / "04_multinode" / "hangs" / "classic_hangs.py"


def lines_of(output: str, rank: int) -> str:
    return "\n".join(line for line in output.splitlines() if line.startswith(f"[rank{rank}] "))


def test_fr_trace_outcomes_are_read_from_the_readers_output():
    as_written = "    pg_name = _pg_guids[(original_pg_name, first_rank)]\nKeyError: ('0', 1)"
    assert hang_tools.fr_trace_as_written(as_written) == "KeyError"
    assert hang_tools.fr_trace_as_written("Collective sequence number: 5 has errors") == "reads"


def test_monitored_barrier_has_nothing_to_say_of_collectives_in_different_orders(tmp_path):
    """The case the notebook does not show: every rank arrives at each barrier, and the
    ranks disagree later, in two all-reduces that both made."""
    command = f"torchrun --standalone --nproc_per_node=2 {CASES} --case order"
    job = start(f"{command} --timeout 3 --monitored_barrier", cwd=tmp_path, quiet=True)
    output = job.wait(timeout=180, expect_failure=True)
    assert "monitoredBarrier" not in output
    # The job ended by the collective's timeout. (On a busy machine one rank times out
    # first and exits; the other may then report the closed connection instead.)
    assert any("Timed out waiting 3000ms" in lines_of(output, rank) for rank in (0, 1)), output
