"""@record in the lesson scripts: what a worker raises reaches torchrun's failure report
with the worker's own traceback (lesson 03). A `sitecustomize` makes every backward()
raise, so the scripts run unchanged. (Without @record: tests/test_common_launch.py.)"""

import pytest
from conftest import REPO, run_with_sitecustomize

INJECTED = "injected by the test: this backward() fails"
SITECUSTOMIZE = f"""import torch
def backward(*args, **kwargs):
    raise RuntimeError({INJECTED!r})
torch.Tensor.backward = backward
"""


@pytest.mark.parametrize(
    "script",
    [
        "03_fault_tolerance/multigpu_torchrun.py",
        "03_fault_tolerance/multigpu_preemptible.py",
        "04_multinode/multinode.py",
    ],
)
def test_a_workers_exception_reaches_torchruns_report_with_its_traceback(tmp_path, script):
    command = f"torchrun --standalone --nproc_per_node=1 {REPO / script} 2 1"  # no peer needed
    output = run_with_sitecustomize(
        tmp_path, SITECUSTOMIZE, command, expect_failure=True, timeout=120
    )
    report = output.split("Root Cause (first observed failure)")[1]
    assert "error_file: <N/A>" not in report, report
    assert "traceback : Traceback (most recent call last):" in report, report
    assert f"RuntimeError: {INJECTED}" in report, report
    assert f'{script.split("/")[1]}", line' in report, report  # the script's own frames
