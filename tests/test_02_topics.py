"""Lesson 02, the "Getting started with DDP" topics: each script's claim, checked on a
real gloo world of 2 CPU processes."""

import re
import subprocess

import pytest
import torch
from conftest import PYTHON, REPO

from common.launch import run

LESSON = REPO / "02_multigpu"
TORCHRUN = "torchrun --standalone --nproc_per_node=2"


def launch(script: str, *arguments: str, cwd, expect_failure: bool = False) -> str:
    command = " ".join([TORCHRUN, str(LESSON / script), *arguments])
    return run(command, cwd=cwd, timeout=180, quiet=True, expect_failure=expect_failure)


def test_no_sync_all_reduces_once_per_step_only_when_the_forward_is_inside(tmp_path):
    output = launch("grad_accumulation.py", "--steps", "5", "--accumulate", "3", cwd=tmp_path)
    found = {
        mode: (int(count), float(difference))
        for mode, count, difference in re.findall(
            r"\[rank0\] mode (\w+) +\| all-reduces +(\d+) .*\| max \|w - w_every\| (\S+)", output
        )
    }
    # One bucket per backward: 5 steps x 3 micro-batches without no_sync, 5 with it;
    # entering no_sync after the forward pass saves nothing.
    assert {mode: count for mode, (count, _) in found.items()} == {
        "every": 15,
        "no_sync": 5,
        "too_late": 15,
    }
    # The traffic differs, the training does not.
    assert all(difference < 1e-6 for _, difference in found.values()), found


def test_a_slow_rank_is_waited_for_within_the_timeout_and_a_clear_error_past_it(tmp_path):
    output = launch(
        "slow_rank.py", "--delays", "1", "120", "--timeout", "2", cwd=tmp_path, expect_failure=True
    )
    # First all_reduce: rank 1 is 1 s late, rank 0 waits for it, both get the sum.
    waited = re.search(
        r"\[rank0\] all_reduce 1 = 2 \(expected 2\) after waiting ([\d.]+) s", output
    )
    assert waited and float(waited[1]) >= 0.9, output
    assert "[rank1] all_reduce 1 = 2 (expected 2)" in output
    # Second: rank 1 is 120 s late; rank 0 gives up after the 2 s timeout, in one line.
    line = re.search(
        r"\[rank0\] all_reduce 2 gave up after waiting ([\d.]+) s \(timeout 2 s\).*", output
    )
    assert line, output
    assert "a rank did not join in time" in line[0]
    assert "Timed out waiting 2000ms" in line[0]  # gloo's own words
    assert 2.0 <= float(line[1]) < 60  # it waited the timeout, then gave up, long before 120 s


def test_uneven_inputs_hang_until_the_timeout_without_join(tmp_path):
    output = launch("uneven_inputs.py", "--timeout", "2", cwd=tmp_path, expect_failure=True)
    assert "[rank0] ran 4 steps; at the end-of-epoch barrier" in output
    assert "[rank1] ran" not in output  # rank 1 never finished its 5th step
    stuck = re.findall(r"\[rank(\d)\] stuck for ([\d.]+) s, then the 2 s timeout ended it", output)
    assert stuck, output
    assert all(float(seconds) >= 2.0 for _, seconds in stuck)
    assert "Timed out waiting 2000ms" in output
    assert "models identical" not in output


def test_join_lets_uneven_ranks_finish_with_identical_models(tmp_path):
    output = launch("uneven_inputs.py", "--join", "--timeout", "20", cwd=tmp_path)
    assert "[rank0] ran 4 steps" in output and "[rank1] ran 5 steps" in output
    assert "[rank0] finished in" in output and "[rank1] finished in" in output
    assert output.count("models identical on all ranks: True") == 2
    assert "stuck" not in output


def test_checkpoint_saved_on_rank_0_is_what_every_rank_loads(tmp_path):
    output = launch("checkpoint_barrier.py", "--path", "sub/ckpt.pt", cwd=tmp_path)
    before = dict(re.findall(r"\[rank(\d)\] before: weights checksum (\S+)", output))
    after = dict(re.findall(r"\[rank(\d)\] after: weights checksum (\S+)", output))
    assert before["0"] != before["1"]  # the ranks really started different
    assert after == {"0": before["0"], "1": before["0"]}
    assert "[rank0] all 2 ranks hold rank 0's weights: True" in output
    assert "[rank1] saved" not in output  # rank 0 alone writes
    saved = torch.load(tmp_path / "sub" / "ckpt.pt", weights_only=True)
    assert set(saved) == {"weight", "bias"}


def test_ddp_over_a_two_stage_model_equals_one_process(tmp_path):
    output = launch("model_parallel.py", "--steps", "10", cwd=tmp_path)
    assert "[rank0] weights identical on all 2 ranks: True" in output
    difference = float(re.search(r"one process, one device\| = (\S+)", output)[1])
    assert difference < 1e-5


def test_sync_batchnorm_on_cpu_refused_and_the_all_reduce_version_equals_one_process(tmp_path):
    output = launch("sync_batchnorm.py", cwd=tmp_path)
    differences = dict(re.findall(r"mode (local|synced) +\|.*one process\| (\S+)", output))
    assert float(differences["synced"]) < 1e-5
    assert float(differences["local"]) > 1e-2  # local statistics train another model
    if not torch.cuda.is_available():
        assert (
            "nn.SyncBatchNorm is refused on cpu: SyncBatchNorm layers only work with GPU" in output
        )


@pytest.mark.parametrize(
    "script, arguments, complaint",
    [
        ("slow_rank.py", ["--timeout", "0"], "--timeout > 0"),
        ("uneven_inputs.py", ["--batches", "0"], "--batches must be >= 1"),
        ("scaling.py", ["--epochs", "1"], "--epochs 1 is too small"),
        ("sync_batchnorm.py", [], "must be started by torchrun"),
    ],
)
def test_topic_scripts_answer_bad_input_in_one_line(script, arguments, complaint, tmp_path):
    result = subprocess.run(
        [PYTHON, LESSON / script, *arguments], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode != 0
    assert result.stderr.count("\n") == 1, result.stderr
    assert complaint in result.stderr
    assert "launch it as: torchrun --standalone --nproc_per_node=" in result.stderr
