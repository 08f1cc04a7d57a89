"""Lesson 05, in one process, what a practitioner audits: the MFU counts the FLOPs
PyTorch counts, against the fastest matrix product timed; weight tying, the TF32
setting, the precision `auto` chooses and keeps across a resume, a schedule that trains
on past its end at min_lr and is not moved by trainer.max_steps, the snapshot files
kept, and a fresh metrics file."""

import json
import math

import pytest
import torch
import torch.distributed as dist
from conftest import REPO, lesson_module
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from common.snapshot import SnapshotError

gpt = lesson_module("05_mingpt", "model")
efficiency = lesson_module("05_mingpt", "efficiency")
precision = lesson_module("05_mingpt", "precision")
schedule = lesson_module("05_mingpt", "schedule")
resume = lesson_module("05_mingpt", "resume")
snapshots = lesson_module("05_mingpt", "snapshots")
interval = lesson_module("05_mingpt", "interval")
lesson_config = lesson_module("05_mingpt", "config")

SHAPE = dict(vocab_size=65, block_size=64, n_layer=2, n_head=4, n_embd=64)


def counted_flops_per_token(model, batch: int = 4) -> float:
    """PyTorch's own count of a forward and backward pass, per token. Attention runs
    its plain (math) kernel here: the counter counts its matrix products, while the
    fused CPU kernel is not among the operators it knows (it would count 0 for it)."""
    tokens = torch.randint(0, SHAPE["vocab_size"], (batch, SHAPE["block_size"]))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        _, loss = model(tokens, tokens)
        loss.backward()
    return counter.get_total_flops() / tokens.numel()


@pytest.mark.parametrize("tied", [False, True])
def test_the_flops_per_token_are_those_pytorch_counts(tied):
    model = gpt.GPT(gpt.GPTShape(**SHAPE, tie_weights=tied))
    ours = efficiency.model_flops_per_token(model, SHAPE["block_size"])
    # Equal: 6 per multiplied weight (the output layer's included, tied or not) and
    # attention's products over the whole context. LayerNorm, softmax, the loss and the
    # additions of biases are not matrix products, and neither count has them.
    assert ours == counted_flops_per_token(model)
    # Counting every parameter, as the lesson did, adds the embedding tables' lookups.
    every = sum(p.numel() for p in model.parameters())
    old = efficiency.flops_per_token(every, SHAPE["n_layer"], SHAPE["n_embd"], SHAPE["block_size"])
    assert old > ours * 1.01 if not tied else old != ours


def test_tied_weights_share_one_matrix_counted_once():
    untied = gpt.GPT(gpt.GPTShape(**SHAPE))
    tied = gpt.GPT(gpt.GPTShape(**SHAPE, tie_weights=True))
    assert tied.lm_head.weight is tied.token_embedding.weight
    count = [sum(p.numel() for p in m.parameters()) for m in (untied, tied)]
    assert count[0] - count[1] == SHAPE["vocab_size"] * SHAPE["n_embd"]
    groups = tied.optimizer_groups(0.1)
    grouped = [id(p) for group in groups for p in group["params"]]
    assert sorted(grouped) == sorted(id(p) for p in tied.parameters())  # each once
    assert any(p is tied.lm_head.weight for p in groups[0]["params"])  # decayed: a matrix
    torch.optim.AdamW(groups)  # accepts them (a parameter in two groups raises)
    block = SHAPE["block_size"]
    assert efficiency.model_flops_per_token(tied, block) == efficiency.model_flops_per_token(
        untied, block
    )  # the same products: tying saves memory, not FLOPs


def test_the_peak_is_the_fastest_size_and_timing_stops_at_a_busy_one(monkeypatch):
    """A device as slow per FLOP at large sizes as bf16 is on a CPU without it in
    hardware: the peak is the small size's speed, and no size after the first that
    takes over 20 ms is timed (on the course's CPU, the 1024 product took 2.4 s)."""
    timed = []

    def fake_seconds(a, b):
        size = a.shape[0]
        timed.append(size)
        return {128: 2 * 128**3 / 3e9, 256: 2 * 256**3 / 1e9}[size]  # 3, then 1 GFLOP/s

    monkeypatch.setattr(efficiency, "seconds_per_product", fake_seconds)
    assert efficiency.peak_flops(torch.device("cpu"), torch.bfloat16) == pytest.approx(3e9)
    assert sorted(set(timed)) == [128, 256]  # 256 took 34 ms: large enough, no 512


def test_tf32_is_set_through_the_api_its_getter_reads():
    """The per-backend flag (`torch.backends.cuda.matmul.fp32_precision = "tf32"`) made
    `torch.get_float32_matmul_precision()` raise, and torch.compile calls it. The flag
    can be set and read without a GPU."""
    try:
        precision.allow_tf32(torch.device("cuda"))
        assert torch.get_float32_matmul_precision() == "high"
        assert torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.set_float32_matmul_precision("highest")
    precision.allow_tf32(torch.device("cpu"))  # nothing on a CPU
    assert torch.get_float32_matmul_precision() == "highest"


@pytest.mark.parametrize(
    "float32_ms, bf16_ms, chosen", [(100, 85, "bf16"), (100, 95, "off"), (100, 300, "off")]
)
def test_auto_on_a_cpu_takes_bf16_only_when_it_wins_by_10_percent(
    monkeypatch, float32_ms, bf16_ms, chosen
):
    seconds = {None: float32_ms / 1000, torch.bfloat16: bf16_ms / 1000}
    monkeypatch.setattr(precision, "_step_seconds", lambda m, i, t, dtype: seconds[dtype])
    monkeypatch.setattr(dist, "all_reduce", lambda tensor: tensor.mul_(2))  # 2 ranks alike
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    result = precision.choose_precision("auto", torch.device("cpu"), None, None, None)
    assert result.name == chosen and not result.loss_scaling
    assert f"{float32_ms} ms in float32, {bf16_ms} ms in bf16" in result.why


@pytest.mark.parametrize(
    "here, other, chosen",
    [(True, True, "bf16"), (False, False, "fp16"), (True, False, "fp16"), (False, True, "fp16")],
)
def test_auto_on_gpus_takes_bf16_only_where_every_rank_has_it_else_fp16_with_scaling(
    monkeypatch, here, other, chosen
):
    """A job of two GPU models (a mixed allocation), faked: this rank's GPU answers
    `here`, rank 1's `other`. Every rank must end in the same precision."""
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation: here)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)

    def all_gather_object(answers, mine):
        answers[:] = [mine, other]

    monkeypatch.setattr(dist, "all_gather_object", all_gather_object)
    result = precision.choose_precision("auto", torch.device("cuda"), None, None, None)
    assert result.name == chosen and result.loss_scaling == (chosen == "fp16")
    lacking = [str(rank) for rank, has in enumerate((here, other)) if not has]
    if lacking:
        assert f"the GPU of rank(s) {', '.join(lacking)} has no bf16" in result.why


def test_a_resume_keeps_the_precision_its_run_chose():
    path = REPO / "snapshot.pt"  # only named in the messages
    state = {"precision": "bf16", "scaler": {}}
    for setting in ("auto", "bf16"):
        kept, notice = precision.resumed_precision(state, setting, False, path)
        assert kept.name == "bf16" and notice is None, setting
    with pytest.raises(SnapshotError) as refused:
        precision.resumed_precision(state, "off", False, path)
    assert str(refused.value) == (
        f"snapshot {path} trained in bf16; trainer.amp=off would finish it in another "
        "precision: resume with trainer.amp=bf16 (or auto), or pass --resume_with_new_config"
    )
    # Told to change it: float32 to fp16 starts a new GradScaler (there is no state to
    # load into it: loading the empty one would raise).
    changed, notice = precision.resumed_precision(
        {"precision": "off", "scaler": {}}, "fp16", True, path
    )
    assert changed.name == "fp16" and changed.loss_scaling
    assert notice == "the snapshot trained without loss scaling: fp16 starts a new GradScaler"


def plan(*overrides: str):
    """The config with 5 warm-up steps and `overrides`, and its plan for 1000 windows:
    15 steps of 64 per epoch, 3 epochs."""
    overrides = ["optimizer.warmup_steps=5", *overrides]
    config = lesson_config.load_config(REPO / "05_mingpt" / "train_cfg.yaml", overrides)
    return config, schedule.count_steps(config, 1000)


def test_max_steps_stops_the_run_but_leaves_its_schedule_alone():
    config, full = plan()
    _, preview = plan("trainer.max_steps=20")
    assert full == (15, 45, 45) and preview == (15, 20, 45)
    opt = config.optimizer
    rates = [schedule.learning_rate(opt, step, 45) for step in range(60)]
    assert rates[:20] == [schedule.learning_rate(opt, s, preview.decay_steps) for s in range(20)]
    assert rates[44] > opt.min_lr and rates[45:] == [opt.min_lr] * 15  # then min_lr, flat
    assert rates[4] == max(rates) == opt.lr and rates == sorted(rates[:5]) + rates[5:]
    assert rates[5:] == sorted(rates[5:], reverse=True)
    _, explicit = plan("optimizer.decay_steps=30")
    assert explicit == (15, 45, 30)
    with pytest.raises(lesson_config.ConfigError, match="not shorter than the schedule"):
        plan("optimizer.decay_steps=30", "optimizer.warmup_steps=30")


def test_training_on_keeps_the_snapshots_schedule_unless_told():
    config, longer = plan("trainer.max_epochs=6")
    kept, notice = resume.resumed_schedule({"decay_steps": 45}, longer.decay_steps, config)
    assert (kept, longer.decay_steps) == (45, 90)
    assert "keeps the snapshot's schedule (cosine decay to min_lr at step 45" in notice
    config.optimizer.decay_steps = 90
    assert resume.resumed_schedule({"decay_steps": 45}, 90, config) == (90, None)


def test_a_share_that_splits_only_into_tiny_micro_batches_is_noted():
    config, _ = plan("trainer.global_batch_size=62", "trainer.batch_size=8")
    assert schedule.micro_batching(config, 2) == (1, 31)
    assert schedule.small_micro_batches(config, 2) == (
        "note: trainer.global_batch_size=62 gives each of 2 process(es) 31 sequences, which "
        "split only into 31 micro-batches of 1 (trainer.batch_size=8); a multiple of 16 "
        "would run them 8 at a time"
    )
    for size in (64, 48, 12):  # shares of 32, 24 (3 x 8) and 6 (one micro-batch)
        config.trainer.global_batch_size = size
        assert schedule.small_micro_batches(config, 2) is None, size


def test_snapshot_files_keep_the_newest_and_the_best(tmp_path):
    files = snapshots.SnapshotFiles(tmp_path / "snapshot.pt", keep=2, rank=0)
    for step in (10, 20, 30):
        files.save({"step": torch.tensor(step)}, step)
    assert [p.name for p in files.kept()] == ["snapshot.step0000020.pt", "snapshot.step0000030.pt"]
    assert torch.load(files.latest)["step"] == 30
    assert torch.load(files.tagged(20))["step"] == 20  # a new latest leaves it whole
    files.save_best({"step": torch.tensor(20)}, 20, 1.5)
    assert torch.load(tmp_path / "snapshot.best.pt")["step"] == 20
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "snapshot.best.pt", "snapshot.pt", "snapshot.step0000020.pt", "snapshot.step0000030.pt"
    ]  # fmt: skip
    other_rank = snapshots.SnapshotFiles(tmp_path / "other.pt", keep=2, rank=1)
    other_rank.save({"step": 40}, 40)
    assert not (tmp_path / "other.pt").exists()  # global rank 0 alone writes


def test_a_fresh_run_starts_an_empty_metrics_file(tmp_path):
    path = tmp_path / "runs" / "metrics.jsonl"
    resume.keep_metrics_up_to(path, None)
    assert path.parent.is_dir() and not path.exists()
    rows = ['{"kind": "val", "step": 0}', '{"kind": "train", "step": 10}', '{"kind": "tr']
    path.write_text("\n".join(rows))
    resume.keep_metrics_up_to(path, 0)  # a resume from step 0's snapshot keeps step 0
    assert path.read_text() == rows[0] + "\n"
    path.write_text("\n".join(rows))
    resume.keep_metrics_up_to(path, None)  # an old run's rows, even its step 0, go
    assert path.read_text() == ""


def test_an_interval_whose_fp16_steps_all_overflowed_writes_strict_json(monkeypatch):
    """Every step of the interval skipped (its gradient norm inf): no finite norm to
    average. Its metrics line must still parse as JSON, which has no `Infinity`."""
    monkeypatch.setattr(dist, "all_reduce", lambda tensor: tensor)  # a world of 1
    steps = interval.Interval(torch.device("cpu"))
    for _ in range(3):
        steps.add(torch.tensor(2.0), torch.tensor(math.inf))
    loss, grad_norm, skipped = steps.summary(world_size=1)
    assert (loss, grad_norm, skipped) == (2.0, math.inf, 3)

    def refuse(constant: str):
        raise ValueError(f"{constant} is not JSON")

    line = interval.metrics_line({"kind": "train", "loss": loss, "grad_norm": grad_norm})
    assert json.loads(line, parse_constant=refuse) == {
        "kind": "train", "loss": 2.0, "grad_norm": None
    }  # fmt: skip
