"""Lesson 05's trainer in gloo worlds of its own: a global batch trains the same however it
is split; fp16 clips the true gradients and its scaler survives a snapshot; watched from
outside, it trains on what its sampler deals and times training only."""

import copy
import sys
import time
from itertools import pairwise

import pytest
import torch
import torch.distributed as dist
from conftest import REPO, lesson_05_text, lesson_module, metrics, spawn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.utils.data import DistributedSampler

from common.ports import free_port
from common.snapshot import SnapshotError

LESSON = REPO / "05_mingpt"
char_dataset = lesson_module("05_mingpt", "char_dataset")
TINY = [
    "model.n_layer=2", "model.n_head=2", "model.n_embd=32", "data.block_size=32",
    "optimizer.warmup_steps=2", "trainer.log_every=1", "trainer.eval_every=1000",
]  # fmt: skip
STEPS = 4
TOLERANCE = 1e-5  # float32 sums in another order: the weights agree to about 1e-7


def build(rank: int, world_size: int, port: int, folder, overrides: list[str]):
    """A Trainer as main.py builds it, in a process of its own (its sys.path may change)."""
    sys.path.insert(0, str(LESSON))
    from char_dataset import build_datasets
    from config import load_config
    from main import build_model
    from trainer import Trainer

    if not dist.is_initialized():
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size
        )
    config = load_config(LESSON / "train_cfg.yaml", TINY + overrides)
    config.trainer.snapshot_path = str(folder / "snapshot.pt")
    config.trainer.metrics_path = str(folder / "metrics.jsonl")
    data = build_datasets(str(folder.parent / "text.txt"), 32, 0.1, config.trainer.seed)
    device = torch.device("cpu")
    model, optimizer = build_model(config, data.vocabulary.vocab_size, device)
    return Trainer(config, model, optimizer, data, device)


def split_run(rank: int, world_size: int, port: int, folder, micro_batches: int) -> None:
    """STEPS steps of a global batch of 16: `world_size` x `micro_batches` x 4."""
    overrides = ["trainer.global_batch_size=16", "trainer.batch_size=4",
                 f"trainer.max_steps={STEPS}", "trainer.amp=fp32"]  # fmt: skip
    trainer = build(rank, world_size, port, folder, overrides)
    assert (trainer.micro_batches, trainer.batch_size) == (micro_batches, 4)
    all_reduces = []

    def counting_hook(state, bucket):
        all_reduces.append(bucket.index())
        return allreduce_hook(state, bucket)

    trainer.model.register_comm_hook(None, counting_hook)
    initial = copy.deepcopy(trainer.raw_model.state_dict())
    trainer.train()
    if rank == 0:
        steps = [row for row in metrics(folder) if row["kind"] == "train"]
        torch.save(
            {"initial": initial, "model": trainer.raw_model.state_dict(),
             "all_reduces": all_reduces, "grad_norms": [row["grad_norm"] for row in steps],
             "losses": [row["loss"] for row in steps]},
            folder / "result.pt",
        )  # fmt: skip
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def text_folder(tmp_path_factory):
    return lesson_05_text(tmp_path_factory.mktemp("05_global_batch")).parent  # build() reads it


def test_one_global_batch_split_three_ways_trains_the_same_weights(text_folder):
    results = {}
    for world_size, micro_batches in [(1, 4), (2, 2), (4, 1)]:
        folder = text_folder / f"{world_size}x{micro_batches}"
        folder.mkdir()
        spawn(split_run, world_size, world_size, free_port(), folder, micro_batches)
        results[world_size, micro_batches] = torch.load(folder / "result.pt")

    reference = results[1, 4]["model"]
    # Each step's gradient and logged loss are the means over the global batch, whatever
    # the split (Adam and the clip would hide a gradient twice too large in the weights).
    for split, result in results.items():
        assert result["grad_norms"] == pytest.approx(results[1, 4]["grad_norms"], rel=1e-5)
        assert result["losses"] == pytest.approx(results[1, 4]["losses"], rel=1e-5), split
        assert len(result["grad_norms"]) == len(result["losses"]) == STEPS, split
        for name, tensor in result["model"].items():
            assert torch.allclose(tensor, reference[name], rtol=0, atol=TOLERANCE), (split, name)
    # They trained: every weight moved from its initial value by more than the tolerance.
    for name, tensor in results[1, 4]["initial"].items():
        assert (tensor - reference[name]).abs().max() > 100 * TOLERANCE, name

    # DDP all-reduced each bucket once per optimizer step, not once per micro-batch:
    # 4 micro-batches under no_sync cost what 1 micro-batch costs.
    per_step = {split: len(r["all_reduces"]) / STEPS for split, r in results.items()}
    assert per_step[1, 4] == per_step[2, 2] == per_step[4, 1] >= 1, per_step
    assert sorted(set(results[1, 4]["all_reduces"])) == list(range(int(per_step[1, 4])))


FP16_RUN = ["trainer.max_steps=30", "trainer.global_batch_size=16", "trainer.batch_size=16"]


def fp16_run(rank: int, world_size: int, port: int, folder) -> None:
    trainer = build(rank, world_size, port, folder, ["trainer.amp=fp16", *FP16_RUN])
    assert trainer.scaler.is_enabled() and trainer.precision.dtype == torch.float16
    # The gradient norm that clip_grad_norm_ sees and returns, for one batch: with the
    # scaler unscaling first it is the true norm, which float32 computes here.
    batch = next(iter(trainer.train_loader))
    reference = copy.deepcopy(trainer.raw_model)
    _, loss = reference(*batch)
    loss.backward()
    true_norm = torch.nn.utils.get_total_norm([p.grad for p in reference.parameters()])
    seen = torch.tensor(float("inf"))
    while not torch.isfinite(seen):  # a step that overflowed is skipped, weights unchanged
        _, seen = trainer._run_step([batch])
    scale = trainer.scaler.get_scale()
    trainer.train()
    resumed = build(rank, world_size, port, folder, ["trainer.amp=fp16", *FP16_RUN])
    assert resumed.finished
    # `auto` on a CPU is float32: the fp16 snapshot is refused, in one line.
    with pytest.raises(SnapshotError, match=r"\(trainer.amp='fp16' -> 'fp32'\)"):
        build(rank, world_size, port, folder, ["trainer.amp=auto", *FP16_RUN])
    torch.save(
        {"true_norm": true_norm.item(), "seen": seen.item(), "scale": scale,
         "scaler": trainer.scaler.state_dict(), "records": metrics(folder),
         "resumed_scaler": resumed.scaler.state_dict()},
        folder / "fp16.pt",
    )  # fmt: skip
    dist.destroy_process_group()


def test_fp16_clips_unscaled_gradients_and_its_scaler_survives_a_snapshot(text_folder):
    folder = text_folder / "fp16"
    folder.mkdir()
    spawn(fp16_run, 1, 1, free_port(), folder)
    result = torch.load(folder / "fp16.pt")
    # The norm clipped is the true one (fp16 rounding aside), not the scaled one, which
    # would be `scale` times larger.
    assert result["scale"] >= 2**8
    assert result["seen"] == pytest.approx(result["true_norm"], rel=2e-2), result
    # It trains in fp16 on the CPU: the validation loss falls, and no step stays skipped.
    val = [r["loss"] for r in result["records"] if r["kind"] == "val"]
    assert val[-1] < val[0] - 0.5, val
    # The scaler's scale and growth counter come back from the snapshot.
    assert result["resumed_scaler"] == result["scaler"] and result["scaler"]["scale"] > 0


SLOW_VALIDATION = 0.3  # seconds each validation waits on top: far above the clock's noise


def watched_run(rank: int, world_size: int, port: int, folder) -> None:
    """Two epochs of 2 micro-batches a step, watched from outside the trainer: the windows
    each micro-batch trains on, and when each progress line and pause (validation,
    snapshot) ran."""
    overrides = ["trainer.global_batch_size=8", "trainer.batch_size=4", "trainer.max_epochs=2",
                 "trainer.log_every=5", "trainer.eval_every=10", "trainer.save_every_steps=6",
                 "trainer.amp=fp32"]  # fmt: skip
    trainer = build(rank, world_size, port, folder, overrides)
    inputs, events = [], []

    def seen(module, arguments):
        if module.training:  # not validation
            inputs.append(arguments[0].clone())

    def timed(name, method, extra=0.0):
        def wrapper(*arguments):
            start = time.perf_counter()
            method(*arguments)
            time.sleep(extra)  # a slower validation, which the trainer must leave out
            events.append((name, start, time.perf_counter()))

        return wrapper

    trainer.raw_model.register_forward_pre_hook(seen)
    trainer._progress = timed("progress", trainer._progress)
    trainer._validate_and_record = timed("pause", trainer._validate_and_record, SLOW_VALIDATION)
    trainer._save_snapshot = timed("pause", trainer._save_snapshot)
    trainer.train()
    torch.save({"inputs": inputs, "events": events, "records": metrics(folder),
                "steps_per_epoch": trainer.steps_per_epoch}, folder / "watched.pt")  # fmt: skip
    dist.destroy_process_group()


def test_a_watched_run_trains_on_what_it_is_dealt_and_times_training_only(tmp_path):
    text_folder = lesson_05_text(tmp_path, 12_000).parent  # two epochs in half the others' time
    folder = text_folder / "watched"
    folder.mkdir()
    spawn(watched_run, 1, 1, free_port(), folder)
    watched = torch.load(folder / "watched.pt")

    # Every micro-batch is what the sampler deals in its epoch after `set_epoch` (a
    # trainer that forgot it would repeat epoch 0).
    _, train_set, _, _ = char_dataset.build_datasets(str(text_folder / "text.txt"), 32, 0.1, 1337)
    expected, steps = [], watched["steps_per_epoch"]
    for epoch in range(2):
        train_set.set_epoch(epoch)
        order = list(DistributedSampler(train_set, 1, 0, shuffle=False, drop_last=True))
        windows = [train_set[index][0] for index in order]
        expected += [torch.stack(windows[i : i + 4]) for i in range(0, steps * 8, 4)]
    assert len(watched["inputs"]) == len(expected) == 2 * steps * 2
    for index, (seen, dealt) in enumerate(zip(watched["inputs"], expected, strict=True)):
        assert torch.equal(seen, dealt), f"micro-batch {index}"
    assert not torch.equal(expected[0], expected[2 * steps])  # the epochs differ

    # Each interval's training seconds in the metrics file, against the wall time from one
    # progress line to the next less the validations and snapshots in between.
    rows = [r for r in watched["records"] if r["kind"] == "train"]
    progress = [(start, end) for name, start, end in watched["events"] if name == "progress"]
    pauses = [(start, end) for name, start, end in watched["events"] if name == "pause"]
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
