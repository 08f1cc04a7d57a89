"""Lesson 05 under torchrun: a run whose worker is killed from outside, or asked to stop
by a signal, mid-epoch, ends with exactly the weights of a run that never stopped, and
no repeated metrics rows, also when the stopped run resumes on two nodes of which one
sees no snapshot; the validation loss is the mean over every rank's shard; a snapshot
path under a file, or a global batch that does not divide among the processes, is
refused in one line; and tokens/s count training time only (validation excluded)."""

import json
import math
import re
import signal
import tempfile
from itertools import pairwise
from pathlib import Path

import psutil
import pytest
import torch
from conftest import REPO, lesson_module, made_once
from torch.utils.data import DistributedSampler

from common.launch import run, start
from common.ports import free_port

MAIN = REPO / "05_mingpt" / "main.py"

char_dataset = lesson_module("05_mingpt", "char_dataset")
gpt = lesson_module("05_mingpt", "model")

# A tiny model on a short text: a global batch of 16 (2 processes x 2 micro-batches x 4:
# a resume skips 2 micro-batches per step done), seconds a run; STEPS_PER_EPOCH below.
# Dropout is on so that the resume must restore every rank's random stream to replay
# exactly, and mixed precision is bf16. Validation every 15 steps falls inside the
# progress intervals of 10; a snapshot every 10 steps.
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


def write_text(folder):
    path = folder / "text.txt"
    path.write_text(char_dataset.load_text(None)[0][:24_000], encoding="utf-8")
    return path


def steps_per_epoch() -> int:
    """Global batches in one epoch of the tiny run's text, as main.py counts them."""
    with tempfile.TemporaryDirectory() as folder:
        _, train_set, _, _ = char_dataset.build_datasets(
            str(write_text(Path(folder))), 32, 0.1, 1337
        )
    return len(train_set) // 16


STEPS_PER_EPOCH = steps_per_epoch()


def train(folder, text):
    folder.mkdir()
    output = run(f"{TORCHRUN} {MAIN} --data {text} {TINY}", cwd=folder, timeout=300, quiet=True)
    (folder / "output.txt").write_text(output)  # for the tests that share the run


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory):
    """One uninterrupted tiny run, once per test run: (its folder, its output, the text)."""
    made = made_once(tmp_path_factory, "05_training", lambda f: train(f / "run", write_text(f)))
    return made / "run", (made / "run" / "output.txt").read_text(), made / "text.txt"


def final_weights_equal(folders) -> list[dict]:
    """The final snapshots of `folders`: two finished runs with the same weights."""
    final = [torch.load(folder / "snapshot.pt") for folder in folders]
    assert final[0]["epochs_run"] == final[1]["epochs_run"] == 2
    assert final[0]["step"] == final[1]["step"] == 2 * STEPS_PER_EPOCH
    for name, tensor in final[0]["model"].items():
        assert torch.equal(tensor, final[1]["model"][name]), name
    return final


def test_a_worker_killed_mid_epoch_resumes_to_the_uninterrupted_weights(straight_run, tmp_path):
    """Rank 1 is SIGKILLed from outside, as the out-of-memory killer would, once rank 0
    has printed a step of the second epoch past its first snapshot there (the ranks step
    together: every step all-reduces). Wherever the kill lands, the restarted group
    resumes from the last snapshot saved and ends with the uninterrupted run's weights."""
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
        for key, tensor in state.items():
            assert torch.equal(tensor, final[1]["optimizer"]["state"][index][key]), (index, key)
    # The same losses printed, and the same sample written at the end.
    assert VALIDATION.findall(straight) == VALIDATION.findall(crashed) != []
    sample = re.compile(r"^\[rank0\] \| .*$", re.MULTILINE)
    assert sample.findall(straight) == sample.findall(crashed) != []

    # The metrics file has each step once (the rows the crashed attempt wrote after
    # its last snapshot are gone), the same rows as the uninterrupted run's, and its
    # clock counts training time across both attempts.
    metrics = [
        [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
        for folder in (straight_folder, crashed_folder)
    ]
    for kind in ("train", "val"):
        rows = [[(r["step"], r["loss"]) for r in m if r["kind"] == kind] for m in metrics]
        assert rows[0] == rows[1] and len(rows[0]) == len(set(rows[0])), kind
    # The clock goes on from the snapshot's: rows of both attempts, in rising order (a
    # clock started again at the resume would fall at the first row after it). Not
    # compared with the other run's time: that depends on the machine's load.
    train_rows = [r for r in metrics[1] if r["kind"] == "train"]
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

    # And the model learns: from the loss of a uniform guess, ln(vocabulary), the
    # validation loss falls every epoch, to well below it. (Lesson 05's notebook shows
    # the full-size run; this proves it at tiny size, far from any time limit.)
    epochs = [float(loss) for _, loss in VALIDATION.findall(straight)]
    assert epochs == sorted(epochs, reverse=True) and len(set(epochs)) == 2, epochs
    assert epochs[-1] < 0.75 * math.log(vocabulary.vocab_size), epochs  # measured: 2.95 < 3.37

    rank0_half = list(DistributedSampler(val_set, num_replicas=2, rank=0, shuffle=False))
    assert abs(epochs[-1] - mean_loss(range(len(val_set)))) < 2e-3
    assert abs(epochs[-1] - mean_loss(rank0_half)) > 2e-3  # so the check above means something


def test_a_stopped_run_saves_the_step_it_stopped_at_and_resumes_exactly_on_two_nodes(
    straight_run, tmp_path
):
    """As a cluster asks (lesson 03, part 3): SIGUSR1 to rank 1 alone, mid-epoch. The
    worker is suspended while it is signalled, so it trains no step between the signal and
    the hold; the steps between rank 0's line and the hold (reading it takes time on a busy
    machine) are the margin the step's bounds allow (not by construction).
    The run then resumes on two nodes of one process each whose snapshot paths are not
    shared: one node has the stopped run's snapshot, the other none. As in lesson 04,
    every rank resumes from the newest any rank sees (a rank training from scratch beside
    it would be a silently wrong run), and the run ends with the uninterrupted weights."""
    straight_folder, _, text = straight_run
    nodes = [tmp_path / "node_a", tmp_path / "node_b"]
    for node in nodes:
        node.mkdir()
    job = start(f"{TORCHRUN} {MAIN} --data {text} {TINY}", cwd=nodes[0], quiet=True)
    job.wait_for(rf"^\[rank0\] epoch 1/2 step 10/{2 * STEPS_PER_EPOCH} ", timeout=300)
    workers = psutil.Process(job.pid).children(recursive=True)
    rank1 = next(w for w in workers if w.environ().get("RANK") == "1")
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
    # Global rank 0 alone saves, on whichever node it ran; the other node's snapshot, if
    # any, is the stopped run's.
    saved = [n for n in nodes if (n / "snapshot.pt").exists()]
    last = [n for n in saved if torch.load(n / "snapshot.pt")["step"] != step]
    assert len(last) == 1, saved
    final_weights_equal([straight_folder, last[0]])


def refused(folder, settings: str, text: str) -> str:
    """The one line main.py, launched with `settings` in `folder`, refuses them with:
    from rank 0 only, no traceback."""
    output = run(f"{TORCHRUN} {MAIN} {settings}", cwd=folder, quiet=True, expect_failure=True)
    lines = [line for line in output.splitlines() if text in line]
    assert len(lines) == 1, output  # from rank 0 only
    assert lines[0].startswith("main.py: ") and "launch it as: torchrun" in lines[0]
    assert "[rank0]: Traceback" not in output and "[rank1]: Traceback" not in output
    return lines[0]


def test_a_snapshot_path_under_a_file_is_refused_in_one_line(tmp_path):
    (tmp_path / "runs").write_text("a file where the snapshot's folder should be")
    line = refused(tmp_path, "trainer.snapshot_path=runs/s.pt", "cannot keep snapshots")
    assert line.startswith("main.py: cannot keep snapshots at runs/s.pt: runs is a file; point")


def test_a_global_batch_that_does_not_divide_among_the_processes_is_refused(tmp_path):
    """Checked once the world size is known. (The notebook checks that a finished run
    says so, and that trainer.max_steps stops mid-epoch with a validation and a
    snapshot; test_scripts, that a warm-up as long as the run is refused.)"""
    line = refused(tmp_path, "trainer.global_batch_size=15", "does not divide")
    assert "trainer.global_batch_size=15 does not divide among 2 processes: use a multiple" in line


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
