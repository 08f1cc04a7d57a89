"""Lesson 02: single_gpu.py and multigpu.py train, save, refuse bad input in one line,
and two processes train exactly the model one process trains on the same global
batches."""

import re
import subprocess

import pytest
import torch
from conftest import PYTHON, REPO

from common.launch import run

LESSON = REPO / "02_multigpu"
SINGLE = LESSON / "single_gpu.py"
MULTI = LESSON / "multigpu.py"
LOSS = re.compile(r"\[rank(\d+)\] epoch (\d+) \| batch size (\d+).*\| loss ([\d.]+)")


def losses(output: str) -> list[float]:
    """The per-epoch losses, checking that only rank 0 printed them."""
    found = LOSS.findall(output)
    assert found and all(rank == "0" for rank, *_ in found), output
    assert [int(epoch) for _, epoch, _, _ in found] == list(range(len(found)))
    return [float(loss) for *_, loss in found]


def weights(folder) -> dict[str, torch.Tensor]:
    return torch.load(folder / "checkpoint.pt", weights_only=True)


def test_two_processes_equal_one_process_on_the_same_global_batches(tmp_path):
    """The reference command lines, each run from a folder of its own (not the lesson
    folder): 2 processes x 32 and 1 process x 64 see the same global batches; 1
    process x 32 sees the same data in other batches. One test, not three, so that
    the parallel workers do not each repeat the trainings."""
    runs = {}
    for name, command in {
        "two_x_32": f"python {MULTI} 20 5 --world_size 2",
        "one_x_64": f"python {SINGLE} 20 5 --batch_size 64",
        "one_x_32": f"python {SINGLE} 20 5",
    }.items():
        folder = tmp_path / name
        folder.mkdir()
        runs[name] = (run(command, cwd=folder, timeout=240, quiet=True), folder)

    # The loss is printed by rank 0 at every epoch and falls to the noise floor
    # (0.01); the checkpoint lands in the folder the command ran in.
    for name, (output, folder) in runs.items():
        curve = losses(output)
        assert len(curve) == 20, name
        assert curve[0] > 5 and curve[-1] < 0.02, (name, curve)
        saved = re.findall(r"epoch (\d+) \| checkpoint saved to (\S+)", output)
        assert saved == [(str(e), str(folder / "checkpoint.pt")) for e in (4, 9, 14, 19)]
    assert "batch size 32 per rank" in runs["two_x_32"][0]

    two, one = weights(runs["two_x_32"][1]), weights(runs["one_x_64"][1])
    assert two.keys() == one.keys() == {"weight", "bias"}  # saved from model.module
    for name in two:
        # Only the order of float additions differs (two partial means averaged, vs
        # one mean of 64): a few units in the last place, nowhere near 1e-6.
        assert torch.allclose(two[name], one[name], rtol=0, atol=1e-6), name
    assert losses(runs["two_x_32"][0]) == pytest.approx(
        losses(runs["one_x_64"][0]), rel=1e-5, abs=2e-6
    )

    # The same data in other batches (twice as many steps of half the size) ends
    # clearly elsewhere: the equality is not "both converged to the same optimum".
    other = weights(runs["one_x_32"][1])
    assert (two["weight"] - other["weight"]).abs().max() > 100 * 1e-6


@pytest.mark.parametrize(
    "script, arguments, complaint",
    [
        (SINGLE, ["20"], "the following arguments are required: save_every"),
        (SINGLE, ["20", "0"], "argument save_every: '0' is not a positive integer"),
        (MULTI, ["20", "5", "--world_size", "0"], "argument --world_size: '0' is not a positive"),
        (MULTI, ["20", "5", "--gpus", "2"], "unrecognized arguments: --gpus 2"),
    ],
)
def test_bad_arguments_get_one_line_and_a_non_zero_exit(script, arguments, complaint, tmp_path):
    result = subprocess.run(
        [PYTHON, script, *arguments], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert complaint in result.stderr
    assert f"launch it as: python {script.name} 20 5" in result.stderr
    assert not (tmp_path / "checkpoint.pt").exists()
