"""Lesson 05 under torchrun: a run killed or stopped mid-epoch ends with exactly the weights
of one that never stopped (also resumed on two nodes, one without a snapshot); validation
is over the whole set; bad settings are refused in one line; tokens/s count training."""

import math
import re
import signal
import tempfile
from itertools import pairwise
from pathlib import Path

import pytest
import torch
from conftest import REPO, assert_same_tensors, lesson_05_text, lesson_module, made_once, metrics
from torch.utils.data import DistributedSampler

from common.launch import run, start
from common.ports import free_port

MAIN = REPO / "05_mingpt" / "main.py"

char_dataset = lesson_module("05_mingpt", "char_dataset")
gpt = lesson_module("05_mingpt", "model")

# A tiny model, seconds a run: a global batch of 16 (2 processes x 2 micro-batches x 4),
# dropout on (a resume must restore every rank's random stream), bf16; validations fall
# inside the progress intervals.
TINY = (
    "model.n_layer=2 model.n_head=2 model.n_embd=32 model.dropout=0.1 data.block_size=32 "
    "trainer.global_batch_size=16 trainer.batch_size=4 trainer.max_epochs=2 "
    "trainer.log_every=10 trainer.eval_every=15 trainer.save_every_steps=10 "
    "trainer.sample_chars=40 trainer.amp=bf16"
)
TOKENS_PER_STEP = 16 * 32  # global batch x block size
SAVE_EVERY_STEPS = 10
TORCHRUN = "torchrun --standalone --nproc_per_node=2"

VALIDATION = re.compile(r"\[rank0\] end of epoch (\d)/2: step \d+/\d+ validation loss ([\d.]+)")


with tempfile.TemporaryDirectory() as scratch:  # global batches an epoch, as main.py counts
    STEPS_PER_EPOCH = (
        len(char_dataset.build_datasets(str(lesson_05_text(Path(scratch))), 32, 0.1, 1337)[1]) // 16
    )


def train(folder, text):
    folder.mkdir()
    output = run(f"{TORCHRUN} {MAIN} --data {text} {TINY}", cwd=folder, timeout=300, quiet=True)
    (folder / "output.txt").write_text(output)  # for the tests that share the run


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory):
    """One uninterrupted tiny run, once per test run: (its folder, its output, the text)."""
    made = made_once(tmp_path_factory, "05_training", lambda f: train(f / "run", lesson_05_text(f)))
    return made / "run", (made / "run" / "output.txt").read_text(), made / "text.txt"


def final_weights_equal(folders) -> list[dict]:
    """The final snapshots of `folders`: two finished runs with the same weights."""
    final = [torch.load(folder / "snapshot.pt") for folder in folders]
    assert final[0]["epochs_run"] == final[1]["epochs_run"] == 2
    assert final[0]["step"] == final[1]["step"] == 2 * STEPS_PER_EPOCH
    assert_same_tensors(final[0]["model"], final[1]["model"])
    return final


def test_a_worker_killed_mid_epoch_resumes_to_the_uninterrupted_weights(straight_run, tmp_path):
    """Rank 1 SIGKILLed from outside (as the out-of-memory killer would) past a snapshot of
    the second epoch: the restarted group resumes from the last one saved."""
    straight_folder, straight, text = straight_run
    crashed_folder = tmp_path / "crashed"
    crashed_folder.mkdir()
    command = f"{TORCHRUN} --max-restarts=1 {MAIN} --data {text} {TINY}"
    job = start(command, cwd=crashed_folder, quiet=True)
    # The first progress line (every 10 steps) after a snapshot of the second epoch.
    line_step = (STEPS_PER_EPOCH + SAVE_EVERY_STEPS) // 10 * 10 + 10
    assert line_step < 2 * STEPS_PER_EPOCH - SAVE_EVERY_STEPS  # room before the end
    job.wait_for(rf"^\[rank0\] epoch 2/2 step {line_step}/{2 * STEPS_PER_EPOCH} ", timeout=300)
    job.kill_worker(rank=1)
    crashed = job.wait(timeout=300)

    resumed = re.findall(
        r"\[rank(\d)\] resuming from snapshot snapshot.pt: 1 epochs, (\d+) steps", crashed
    )
    assert sorted(rank for rank, _ in resumed) == ["0", "1"], crashed
    last_save = int(resumed[0][1])
    assert last_save % SAVE_EVERY_STEPS == 0 and last_save >= line_step - SAVE_EVERY_STEPS
    assert last_save > STEPS_PER_EPOCH  # a resume mid-epoch, the case this test is for
    assert "[rank0] finished after 1 restart(s)" in crashed
    assert "resuming" not in straight

    final = final_weights_equal([straight_folder, crashed_folder])
    for index, state in final[0]["optimizer"]["state"].items():
        assert_same_tensors(state, final[1]["optimizer"]["state"][index])
    # The same losses printed, and the same sample written at the end.
    assert VALIDATION.findall(straight) == VALIDATION.findall(crashed) != []
    sample = re.compile(r"^\[rank0\] \| .*$", re.MULTILINE)
    assert sample.findall(straight) == sample.findall(crashed) != []

    # The metrics file has each step once, the uninterrupted run's rows.
    both = [metrics(folder) for folder in (straight_folder, crashed_folder)]
    for kind in ("train", "val"):
        rows = [[(r["step"], r["loss"]) for r in m if r["kind"] == kind] for m in both]
        assert rows[0] == rows[1] and len(rows[0]) == len(set(rows[0])), kind
    # Its clock goes on from the snapshot's: rising across both attempts.
    train_rows = [r for r in both[1] if r["kind"] == "train"]
    seconds = [r["seconds"] for r in train_rows]
    around = {last_save - SAVE_EVERY_STEPS, last_save, min(last_save + 10, 2 * STEPS_PER_EPOCH)}
    assert seconds == sorted(seconds) and around <= {r["step"] for r in train_rows}

    # The validation loss printed is the mean over the whole validation set, not one
    # rank's half of it: recompute both in this process from the final weights.
    vocabulary, _, val_set, _ = char_dataset.build_datasets(str(text), 32, 0.1, 1337)
    shape = gpt.GPTShape(vocabulary.vocab_size, 32, n_layer=2, n_head=2, n_embd=32)
    model = gpt.GPT(shape).eval()
    model.load_state_dict(final[0]["model"])

    def mean_loss(indices):
        pairs = [val_set[i] for i in indices]
        inputs, targets = (torch.stack([pair[k] for pair in pairs]) for k in (0, 1))
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            return model(inputs, targets)[1].item()

    # It learns: from a uniform guess's ln(vocabulary), the loss falls every epoch.
    epochs = [float(loss) for _, loss in VALIDATION.findall(straight)]
    assert epochs == sorted(epochs, reverse=True) and len(set(epochs)) == 2, epochs
    assert epochs[-1] < 0.75 * math.log(vocabulary.vocab_size), epochs  # measured: 2.95 < 3.37

    rank0_half = list(DistributedSampler(val_set, num_replicas=2, rank=0, shuffle=False))
    assert abs(epochs[-1] - mean_loss(range(len(val_set)))) < 2e-3
    assert abs(epochs[-1] - mean_loss(rank0_half)) > 2e-3  # so the check above means something


def test_a_stopped_run_saves_the_step_it_stopped_at_and_resumes_exactly_on_two_nodes(
    straight_run, tmp_path
):
    """SIGUSR1 to rank 1 alone, mid-epoch, as a cluster asks (lesson 03, part 3); rank 1 is
    suspended meanwhile, the step's bounds allow for reading rank 0's line late. Then two
    nodes, only one with the snapshot: every rank resumes from the newest any rank sees
    (as in lesson 04), not from scratch beside it."""
    straight_folder, _, text = straight_run
    nodes = [tmp_path / "node_a", tmp_path / "node_b"]
    for node in nodes:
        node.mkdir()
    job = start(f"{TORCHRUN} {MAIN} --data {text} {TINY}", cwd=nodes[0], quiet=True)
    job.wait_for(rf"^\[rank0\] epoch 1/2 step 10/{2 * STEPS_PER_EPOCH} ", timeout=300)
    rank1 = job.worker(1)
    rank1.suspend()
    rank1.send_signal(signal.SIGUSR1)
    rank1.resume()
    stopped = job.wait(300, expect_failure=True)

    agreed = re.findall(r"\[rank(\d)\] stop agreed at step (\d+) \| signal here: (.*)", stopped)
    step = int(agreed[0][1])
    assert sorted(agreed) == [("0", str(step), "none (another rank did)"),
                              ("1", str(step), "SIGUSR1")], stopped  # fmt: skip
    assert 10 <= step <= 13, step  # the next step or so: not an epoch end, not the end
    exit_codes = re.findall(r"exitcode +: (-?\d+) \(pid", stopped)  # torchrun's report
    assert exit_codes == ["75", "75"], stopped  # both workers: "stopped, resume me"
    assert torch.load(nodes[0] / "snapshot.pt")["step"] == step

    rendezvous = f"--rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:{free_port()} --rdzv_id=05"
    command = f"torchrun --nnodes=2 --nproc_per_node=1 {rendezvous} {MAIN} --data {text} {TINY}"
    jobs = [start(command, cwd=node, quiet=True) for node in nodes]
    output = "".join(job.wait(timeout=300) for job in jobs)
    seen = re.search(
        r"snapshots seen: rank 0: (.*), rank 1: (.*); every rank resumes from rank (\d)'s", output
    )
    assert seen and sorted(seen.groups()[:2]) == ["none", f"step {step}"], output
    assert seen.group(1 + int(seen.group(3))) == f"step {step}"  # the rank that sees it
    for rank in (0, 1):
        assert f"[rank{rank}] resuming from snapshot snapshot.pt: 0 epochs, {step} steps" in output
    # Global rank 0 alone saves, wherever it ran; another snapshot is the stopped run's.
    saved = [n for n in nodes if (n / "snapshot.pt").exists()]
    last = [n for n in saved if torch.load(n / "snapshot.pt")["step"] != step]
    assert len(last) == 1, saved
    final_weights_equal([straight_folder, last[0]])


@pytest.mark.parametrize(
    "settings, found, message",
    [  # a snapshot path under a file; a global batch, once the world size is known
        (
            "trainer.snapshot_path=runs/s.pt",
            "cannot keep snapshots",
            "main.py: cannot keep snapshots at runs/s.pt: runs is a file; point",
        ),
        (
            "trainer.global_batch_size=15",
            "does not divide",
            "main.py: trainer.global_batch_size=15 does not divide among 2 processes: use a",
        ),
    ],
)
def test_settings_that_cannot_run_are_refused_in_one_line_from_rank_0(
    tmp_path, settings, found, message
):
    (tmp_path / "runs").write_text("a file where the snapshot's folder should be")
    output = run(f"{TORCHRUN} {MAIN} {settings}", cwd=tmp_path, quiet=True, expect_failure=True)
    lines = [line for line in output.splitlines() if found in line]
    assert len(lines) == 1, output  # from rank 0 only
    assert lines[0].startswith(message) and "launch it as: torchrun" in lines[0]
    assert "[rank0]: Traceback" not in output and "[rank1]: Traceback" not in output


def test_each_progress_line_counts_its_steps_over_training_time_only(straight_run):
    """tokens/s of an interval = its steps x tokens per step / its training seconds, also
    when a validation falls inside it (the cumulative `seconds` leaves validation out)."""
    rows = metrics(straight_run[0])
    train = [row for row in rows if row["kind"] == "train"]
    validated = {row["step"] for row in rows if row["kind"] == "val"}
    pairs = [(a, b) for a, b in pairwise(train) if a["epoch"] == b["epoch"]]
    # A validation at step s runs after step s's progress line: inside the next interval.
    inside = [b for a, b in pairs if any(a["step"] <= step < b["step"] for step in validated)]
    assert len(inside) >= 4, train
    for earlier, later in pairs:
        steps, seconds = later["step"] - earlier["step"], later["seconds"] - earlier["seconds"]
        expected = steps * TOKENS_PER_STEP / seconds
        assert later["tokens_per_second"] == pytest.approx(expected, rel=1e-9), (earlier, later)
