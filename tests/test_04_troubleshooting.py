"""Lesson 04, troubleshooting: each failure is reproduced for real, within seconds, and
ends with the error text the notebook's table promises; the fixed version runs."""

import re
import subprocess

import pytest
from conftest import PYTHON, REPO

from common.launch import run

CASES = REPO / "04_multinode" / "troubleshooting"
COLLECTIVE = f"torchrun --standalone --nproc_per_node=2 {CASES / 'one_collective_too_many.py'}"


# The hang, monitored_barrier and TORCH_DISTRIBUTED_DEBUG=DETAIL are run and checked by
# the lesson 04 notebook's own check cell.


def test_without_the_extra_collective_the_job_ends(tmp_path):
    output = run(f"{COLLECTIVE} --timeout 3 --fixed", quiet=True, cwd=tmp_path)
    assert "[rank0] epoch 2 | loss 0.3333" in output
    assert "[rank0] done" in output and "[rank1] done" in output


@pytest.mark.parametrize(
    "case, error",
    [
        (
            "port_in_use.py",
            "The server socket has failed to listen on any local network address. port: {port}",
        ),
        ("missing_node.py", "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError"),
        (
            "unreachable_master.py",
            "The client socket has timed out after 3000ms while trying to connect to "
            "(127.0.0.1, {port})",
        ),
    ],
)
def test_launch_failures_show_their_error(case, error, tmp_path):
    output = run(f"python {CASES / case}", expect_failure=True, quiet=True, cwd=tmp_path)
    # The error names the very port that the command line gave torchrun.
    port = re.search(r"(?:--master_port=|--rdzv_endpoint=127\.0\.0\.1:)(\d+)", output).group(1)
    assert error.format(port=port) in output, output[-3000:]
    assert "failed as expected" in output
    if case == "port_in_use.py":
        assert "EADDRINUSE" in output


@pytest.mark.parametrize("case", ["port_in_use.py", "missing_node.py", "unreachable_master.py"])
def test_case_scripts_take_no_arguments(case):
    result = subprocess.run([PYTHON, CASES / case, "--bogus"], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert f"launch it as: python {case}" in result.stderr
