"""Lesson 05's trainer in gloo worlds of its own: the global batch does not depend on
how it is split among processes and micro-batches (same weights, the same logged
losses, one round of all-reduces per step); and fp16 with a GradScaler clips the true
gradients and keeps its scaler state across a snapshot, while a resume in another
precision is refused."""

import copy
import json
import os
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from conftest import REPO, lesson_module
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

from common.ports import free_port
from common.snapshot import SnapshotError

LESSON = REPO / "05_mingpt"
TINY = [
    "model.n_layer=2", "model.n_head=2", "model.n_embd=32", "data.block_size=32",
    "optimizer.warmup_steps=2", "trainer.log_every=1", "trainer.eval_every=1000",
]  # fmt: skip
STEPS = 4
TOLERANCE = 1e-5  # float32 sums in another order: the weights agree to about 1e-7


def build(rank: int, world_size: int, port: int, folder, overrides: list[str]):
    """A Trainer as main.py builds it, in a world of `world_size` on this machine (a
    process of its own, whose imports may put the lesson folder on its sys.path)."""
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
    """STEPS steps of a global batch of 16, micro-batches of at most 4: `world_size`
    processes x `micro_batches` x 4."""
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
        torch.save(
            {"initial": initial, "model": trainer.raw_model.state_dict(),
             "all_reduces": all_reduces, "grad_norms": logged(folder, "grad_norm"),
             "losses": logged(folder, "loss")},
            folder / "result.pt",
        )  # fmt: skip
    dist.destroy_process_group()


def records(folder) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def logged(folder, key: str) -> list[float]:
    """`key` of every step, from the metrics file (trainer.log_every=1)."""
    return [record[key] for record in records(folder) if record["kind"] == "train"]


def spawn(function, world_size: int, *args) -> None:
    """`function(rank, world_size, port, *args)` in `world_size` new processes. They come
    from a fork server that imported torch once (a fresh, single-threaded process: safe
    to fork, unlike this test worker), which saves each world the import's seconds."""
    os.environ["OMP_NUM_THREADS"] = "1"
    mp.set_forkserver_preload(["torch", "torch.distributed"])
    mp.start_processes(
        function, (world_size, free_port(), *args), world_size, start_method="forkserver"
    )


@pytest.fixture(scope="module")
def text_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("05_global_batch")
    text = lesson_module("05_mingpt", "char_dataset").load_text(None)[0][:24_000]
    (folder / "text.txt").write_text(text, encoding="utf-8")
    return folder


def test_one_global_batch_split_three_ways_trains_the_same_weights(text_folder):
    results = {}
    for world_size, micro_batches in [(1, 4), (2, 2), (4, 1)]:
        folder = text_folder / f"{world_size}x{micro_batches}"
        folder.mkdir()
        spawn(split_run, world_size, folder, micro_batches)
        results[world_size, micro_batches] = torch.load(folder / "result.pt")

    reference = results[1, 4]["model"]
    # The gradient of every step is the mean over the global batch: the same norm.
    # (Adam and the clip would hide a gradient twice too large in the weights.)
    # And the loss each step logs is the mean over the global batch, whatever the split.
    for split, result in results.items():
        assert result["grad_norms"] == pytest.approx(results[1, 4]["grad_norms"], rel=1e-5)
        assert result["losses"] == pytest.approx(results[1, 4]["losses"], rel=1e-5), split
        assert len(result["grad_norms"]) == len(result["losses"]) == STEPS, split
    for split, result in results.items():
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
         "scaler": trainer.scaler.state_dict(), "records": records(folder),
         "resumed_scaler": resumed.scaler.state_dict()},
        folder / "fp16.pt",
    )  # fmt: skip
    dist.destroy_process_group()


def test_fp16_clips_unscaled_gradients_and_its_scaler_survives_a_snapshot(text_folder):
    folder = text_folder / "fp16"
    folder.mkdir()
    spawn(fp16_run, 1, folder)
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
