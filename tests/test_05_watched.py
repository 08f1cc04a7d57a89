"""Lesson 05's trainer watched from outside, in a gloo world of its own: every epoch
trains on the windows its sampler deals (after `set_epoch`), and the tokens/s of each
progress line counts training time only, against a clock outside the trainer."""

import time
from itertools import pairwise

import pytest
import torch
import torch.distributed as dist
from conftest import lesson_module
from test_05_global_batch import build, records, spawn
from torch.utils.data import DistributedSampler

SLOW_VALIDATION = 0.3  # seconds each validation waits on top: far above the clock's noise


def watched_run(rank: int, world_size: int, port: int, folder) -> None:
    """Two epochs of 2 micro-batches a step, watched from outside the trainer: the
    windows each micro-batch trains on, and the wall-clock time of every progress line
    and of every pause (validation, snapshot) between them."""
    overrides = ["trainer.global_batch_size=8", "trainer.batch_size=4", "trainer.max_epochs=2",
                 "trainer.log_every=5", "trainer.eval_every=20", "trainer.save_every_steps=6",
                 "trainer.amp=fp32"]  # fmt: skip
    trainer = build(rank, world_size, port, folder, overrides)
    inputs, events = [], []

    def seen(module, arguments):
        if module.training:  # not validation
            inputs.append(arguments[0].clone())

    trainer.raw_model.register_forward_pre_hook(seen)

    def timed(name, method, extra=0.0):
        def wrapper(*arguments):
            events.append((name, "in", time.perf_counter()))
            method(*arguments)
            time.sleep(extra)  # a slower validation, which the trainer must leave out
            events.append((name, "out", time.perf_counter()))

        return wrapper

    trainer._progress = timed("progress", trainer._progress)
    trainer._validate_and_record = timed("pause", trainer._validate_and_record, SLOW_VALIDATION)
    trainer._save_snapshot = timed("pause", trainer._save_snapshot)
    trainer.train()
    torch.save({"inputs": inputs, "events": events, "records": records(folder),
                "steps_per_epoch": trainer.steps_per_epoch}, folder / "watched.pt")  # fmt: skip
    dist.destroy_process_group()


def test_a_watched_run_trains_on_what_it_is_dealt_and_times_training_only(tmp_path):
    text_folder = tmp_path  # build() reads the text beside the run's folder
    text = lesson_module("05_mingpt", "char_dataset").load_text(None)[0][:24_000]
    (text_folder / "text.txt").write_text(text, encoding="utf-8")
    folder = text_folder / "watched"
    folder.mkdir()
    spawn(watched_run, 1, folder)
    watched = torch.load(folder / "watched.pt")
    every_epoch_trains_on_the_windows_its_sampler_deals(text_folder, watched)
    tokens_per_second_leave_validation_and_snapshots_out(watched)


def every_epoch_trains_on_the_windows_its_sampler_deals(text_folder, watched):
    """What the model saw, micro-batch by micro-batch, against what the sampler deals in
    each epoch after `set_epoch` (a trainer that forgot it would repeat epoch 0)."""
    char_dataset = lesson_module("05_mingpt", "char_dataset")
    _, train_set, _, _ = char_dataset.build_datasets(str(text_folder / "text.txt"), 32, 0.1, 1337)
    expected = []
    for epoch in range(2):
        train_set.set_epoch(epoch)
        order = list(DistributedSampler(train_set, 1, 0, shuffle=False, drop_last=True))
        windows = [train_set[index][0] for index in order]
        steps = watched["steps_per_epoch"]
        expected += [torch.stack(windows[i : i + 4]) for i in range(0, steps * 8, 4)]
    assert len(watched["inputs"]) == len(expected) == 2 * steps * 2
    for index, (seen, dealt) in enumerate(zip(watched["inputs"], expected, strict=True)):
        assert torch.equal(seen, dealt), f"micro-batch {index}"
    assert not torch.equal(expected[0], expected[2 * steps])  # the epochs differ


def tokens_per_second_leave_validation_and_snapshots_out(watched):
    """Each interval's training seconds, as the metrics file has them, against a clock
    outside the trainer: the wall time from one progress line to the next, less the
    validations and snapshots in between (each validation made 0.3 s slower)."""
    events, rows = watched["events"], [r for r in watched["records"] if r["kind"] == "train"]
    steps = [(a[2], b[2], a[0]) for a, b in pairwise(events) if a[1] == "in"]  # in, out
    progress = [(start, end) for start, end, name in steps if name == "progress"]
    pauses = [(start, end) for start, end, name in steps if name == "pause"]
    assert len(progress) == len(rows)
    compared = 0
    for (earlier, later), ((_, start), (end, _)) in zip(
        pairwise(rows), pairwise(progress), strict=True
    ):
        if earlier["epoch"] != later["epoch"]:
            continue  # the interval started with the epoch, not at a progress line
        paused = sum(b - a for a, b in pauses if start <= a and b <= end)
        reported = later["seconds"] - earlier["seconds"]
        assert reported == pytest.approx(end - start - paused, abs=0.05), (earlier, later)
        compared += paused >= SLOW_VALIDATION
    assert compared >= 4  # intervals with a validation inside were among them
