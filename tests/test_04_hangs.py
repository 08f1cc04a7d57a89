"""Lesson 04, part 2: what the notebook's check cell does not assert on its own runs (it
asserts every hang and what each tool says of it: the rank and the call): the two bugs
fixed, DDP under DETAIL, monitored_barrier on the order case, and py-spy itself.

py-spy is part of the course (requirements.txt): where it cannot read a process, its
test skips saying why, and fails under COURSE_STRICT=1 (CI, as root)."""

import re
import subprocess

import pytest
import torch
from conftest import PYTHON, REPO, lesson_module, skip_or_fail

from common.launch import run, start

hang_tools = lesson_module("04_multinode/hangs", "hang_tools")

CASES = REPO / "04_multinode" / "hangs" / "classic_hangs.py"
READER = "python -m torch.distributed.flight_recorder.fr_trace"


def launch(case: str, options: str, folder, env=None):
    return start(
        f"torchrun --standalone --nproc_per_node=2 {CASES} --case {case} {options}",
        cwd=folder,
        quiet=True,
        env=env,
    )


def lines_of(output: str, rank: int) -> str:
    return "\n".join(line for line in output.splitlines() if line.startswith(f"[rank{rank}] "))


@pytest.mark.parametrize("case", ["rank0_only", "order"])
def test_without_the_bug_the_job_ends(case, tmp_path):
    output = run(
        f"torchrun --standalone --nproc_per_node=2 {CASES} --case {case} --fixed --timeout 20",
        timeout=180,
        quiet=True,
        cwd=tmp_path,
    )
    assert "[rank0] done, 4 steps" in output and "[rank1] done, 4 steps" in output
    if case == "order":  # one order, the same on every rank
        assert output.count("step 1 | all-reducing histogram, loss") == 2, output


def test_ddp_under_detail_does_what_was_measured_for_this_release(tmp_path):
    """The notebook states what DDP does under DETAIL on gloo with PyTorch 2.11 to 2.14
    (hang_tools.MEASURED: it crashes); the installed release must do what its row says."""
    expected = hang_tools.measured("DDP under DETAIL", torch.__version__)
    skip_or_fail(None if expected else f"PyTorch {torch.__version__} is not in hang_tools.MEASURED")
    assert hang_tools.ddp_under_detail(tmp_path) == expected


def test_fr_trace_outcomes_are_read_from_the_readers_output():
    as_written = "    pg_name = _pg_guids[(original_pg_name, first_rank)]\nKeyError: ('0', 1)"
    assert hang_tools.fr_trace_as_written(as_written) == "KeyError"
    assert hang_tools.fr_trace_as_written("Collective sequence number: 5 has errors") == "reads"


def test_monitored_barrier_has_nothing_to_say_of_collectives_in_different_orders(tmp_path):
    """The case the notebook does not show: every rank arrives at each barrier, and the
    ranks disagree later, in two all-reduces that both made."""
    output = launch("order", "--timeout 3 --monitored_barrier", tmp_path)
    output = output.wait(timeout=180, expect_failure=True)
    assert "monitoredBarrier" not in output
    # The job ended by the collective's timeout. (On a busy machine one rank times out
    # first and exits; the other may then report the closed connection instead.)
    assert any("Timed out waiting 3000ms" in lines_of(output, rank) for rank in (0, 1)), output


def test_py_spy_reads_the_stack_of_a_running_python_process(tmp_path):
    """The notebook reads the hung ranks with py-spy where it can run, and says why not
    where it cannot: under COURSE_STRICT=1 (CI, as root) it must run."""
    problem = hang_tools.why_py_spy_cannot_run()
    skip_or_fail(problem)
    code = "import threading\ndef waits_here():\n    threading.Event().wait()\nwaits_here()\n"
    (tmp_path / "waiter.py").write_text(code)
    waiter = subprocess.Popen([PYTHON, tmp_path / "waiter.py"])
    try:
        stack = hang_tools.py_spy_dump(waiter.pid, until=r"waits_here \(", timeout=60)
    finally:
        waiter.kill()
        waiter.wait()
    assert re.search(r"wait .*\n(.*\n)*\s+waits_here \(waiter\.py:3\)", stack), stack
