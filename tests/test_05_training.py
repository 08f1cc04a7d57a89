"""Lesson 05 under torchrun: a run that crashes mid-epoch and resumes ends with exactly
the weights of a run that never crashed, the validation loss is the mean over every
rank's shard, a snapshot of another model is refused in one line, and the speed on each
progress line is training time only (validation excluded)."""

import json
import math
import re
import shutil
from itertools import pairwise

import pytest
import torch
from conftest import REPO, lesson_module
from torch.utils.data import DistributedSampler

from common.launch import run

LESSON = REPO / "05_mingpt"
MAIN = LESSON / "main.py"

char_dataset = lesson_module("05_mingpt", "char_dataset")
gpt = lesson_module("05_mingpt", "model")

# A tiny model on a short text: 42 steps per epoch, seconds per run. Dropout is on so
# that the resume must restore every rank's random stream to replay exactly, and
# mixed precision (bf16 on CPU) is on, as in the YAML. Validation every 15 steps falls
# inside the progress intervals of 10.
TINY = (
    "model.n_layer=2 model.n_head=2 model.n_embd=32 model.dropout=0.1 data.block_size=32 "
    "trainer.batch_size=8 trainer.max_epochs=3 trainer.log_every=10 trainer.eval_every=15 "
    "trainer.sample_chars=40"
)
TOKENS_PER_STEP = 8 * 2 * 32  # batch size x processes x block size
VALIDATION = re.compile(r"\[rank0\] end of epoch (\d)/3: step \d+/\d+ validation loss ([\d.]+)")


def write_text(folder):
    text, _ = char_dataset.load_text(None)
    path = folder / "text.txt"
    path.write_text(text[:24_000], encoding="utf-8")
    return path


def train(folder, text, extra="", torchrun_options="", env=None):
    folder.mkdir()
    return run(
        f"torchrun --standalone --nproc_per_node=2 {torchrun_options} {MAIN} --data {text} "
        f"{TINY} {extra}",
        cwd=folder,
        timeout=300,
        quiet=True,
        env=env,
    )


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory):
    """One uninterrupted tiny run, shared: (its folder, its output, the text file)."""
    folder = tmp_path_factory.mktemp("05_training")
    text = write_text(folder)
    return folder / "straight", train(folder / "straight", text), text


def test_crash_mid_epoch_and_resume_equals_the_uninterrupted_run(straight_run, tmp_path):
    straight_folder, straight, text = straight_run
    crashed = train(
        tmp_path / "crashed",
        text,
        "--crash_rank 1 --crash_epoch 1 --crash_step 17",
        "--max-restarts=1",
        env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"},  # a fresh store per attempt
    )

    assert re.search(
        r"\[rank1\] injected failure: pid \d+ kills itself at epoch 1 step 17", crashed
    )
    assert crashed.count("injected failure") == 1  # once: not again after the restart
    assert "resuming from snapshot snapshot.pt: 1 epochs, 42 steps done" in crashed
    assert "[rank0] finished after 1 restart(s)" in crashed
    assert "injected failure" not in straight and "resuming" not in straight

    final = [
        torch.load(folder / "snapshot.pt") for folder in (straight_folder, tmp_path / "crashed")
    ]
    assert final[0]["epochs_run"] == final[1]["epochs_run"] == 3
    assert final[0]["step"] == final[1]["step"] == 3 * 42
    for name, tensor in final[0]["model"].items():
        assert torch.equal(tensor, final[1]["model"][name]), name
    for index, state in final[0]["optimizer"]["state"].items():
        for key, tensor in state.items():
            assert torch.equal(tensor, final[1]["optimizer"]["state"][index][key]), (index, key)
    # The same losses printed, and the same sample written at the end.
    assert VALIDATION.findall(straight) == VALIDATION.findall(crashed)[-3:]
    sample = re.compile(r"^\[rank0\] \| .*$", re.MULTILINE)
    assert sample.findall(straight) == sample.findall(crashed) != []

    # The validation loss printed is the mean over the whole validation set, not one
    # rank's half of it: recompute both in this process from the final weights.
    dataset, _, val_set, _ = char_dataset.build_datasets(str(text), 32, 0.1, 0)
    shape = gpt.GPTShape(dataset.vocab_size, 32, n_layer=2, n_head=2, n_embd=32)
    model = gpt.GPT(shape).eval()
    model.load_state_dict(final[0]["model"])

    def mean_loss(indices):
        pairs = [val_set[i] for i in indices]
        inputs, targets = (torch.stack([pair[k] for pair in pairs]) for k in (0, 1))
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            return model(inputs, targets)[1].item()

    # And the model learns: from the loss of a uniform guess, ln(vocabulary), the
    # validation loss falls every epoch, to well below it. (Lesson 05's notebook shows
    # the full-size run; this proves it at tiny size, far from any time limit.)
    epochs = [float(loss) for _, loss in VALIDATION.findall(straight)]
    assert epochs == sorted(epochs, reverse=True) and len(set(epochs)) == 3, epochs
    assert epochs[-1] < 0.75 * math.log(dataset.vocab_size), epochs  # measured: 2.64 < 4.50

    printed = float(VALIDATION.findall(straight)[-1][1])
    rank0_half = list(DistributedSampler(val_set, num_replicas=2, rank=0, shuffle=False))
    assert abs(printed - mean_loss(range(len(val_set)))) < 2e-3
    assert abs(printed - mean_loss(rank0_half)) > 2e-3  # so the check above means something


def test_a_snapshot_of_another_model_is_refused_in_one_line(straight_run, tmp_path):
    straight_folder, _, text = straight_run
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(straight_folder / "snapshot.pt", folder)  # a snapshot of n_embd=32
    output = run(
        f"torchrun --standalone --nproc_per_node=2 {MAIN} --data {text} {TINY} model.n_embd=64",
        cwd=folder,
        timeout=300,
        quiet=True,
        expect_failure=True,
    )
    lines = [line for line in output.splitlines() if "does not fit this model" in line]
    assert len(lines) == 1, output  # from rank 0 only
    assert lines[0].startswith("main.py: snapshot snapshot.pt does not fit this model (size")
    assert "delete it to start from scratch" in lines[0]
    assert "[rank0]: Traceback" not in output and "[rank1]: Traceback" not in output


def test_each_progress_line_counts_its_steps_over_training_time_only(straight_run):
    """tokens/s of an interval = its steps x tokens per step / its training seconds, also
    when a validation falls inside it (the cumulative `seconds` leaves validation out)."""
    folder, _, _ = straight_run
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    train = [record for record in records if record["kind"] == "train"]
    validated = {record["step"] for record in records if record["kind"] == "val"}
    pairs = [(a, b) for a, b in pairwise(train) if a["epoch"] == b["epoch"]]
    # A validation at step s runs after step s's progress line: inside the next interval.
    inside = [b for a, b in pairs if any(a["step"] <= step < b["step"] for step in validated)]
    assert len(inside) >= 4, train
    for earlier, later in pairs:
        steps, seconds = later["step"] - earlier["step"], later["seconds"] - earlier["seconds"]
        expected = steps * TOKENS_PER_STEP / seconds
        assert later["tokens_per_second"] == pytest.approx(expected, rel=1e-9), (earlier, later)
