"""Lesson 05, in one process, what a practitioner audits: FLOPs per token, TF32, the
precision `auto` chooses, the schedule, snapshots and metrics files."""

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
snapshots = lesson_module("05_mingpt", "snapshots")
interval = lesson_module("05_mingpt", "interval")
lesson_config = lesson_module("05_mingpt", "config")

CONFIG = REPO / "05_mingpt" / "train_cfg.yaml"
SHAPE = dict(vocab_size=65, block_size=64, n_layer=2, n_head=4, n_embd=64)


@pytest.mark.parametrize("tied", [False, True])
def test_the_flops_per_token_are_those_pytorch_counts(tied):
    model = gpt.GPT(gpt.GPTShape(**SHAPE, tie_weights=tied))
    ours = efficiency.model_flops_per_token(model, SHAPE["block_size"])
    # PyTorch's own count of a forward and backward pass, with attention's plain (math)
    # kernel: the counter knows its products, not the fused CPU kernel's.
    tokens = torch.randint(0, SHAPE["vocab_size"], (4, SHAPE["block_size"]))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(tokens, tokens)[1].backward()
    # 6 per multiplied weight (the output layer's, tied or not) and attention's products
    # over the whole context; neither count has the norms, softmax, loss or biases.
    assert ours == counter.get_total_flops() / tokens.numel()
    # Counting every parameter adds the embedding tables' lookups (efficiency.py says so).
    every = sum(p.numel() for p in model.parameters())
    old = efficiency.flops_per_token(every, SHAPE["n_layer"], SHAPE["n_embd"], SHAPE["block_size"])
    assert old > ours * 1.01 if not tied else old != ours


def test_tf32_is_set_through_the_api_its_getter_reads():
    """torch.compile calls `torch.get_float32_matmul_precision()`, which the per-backend
    flag makes raise. The flag can be set and read without a GPU."""
    try:
        precision.allow_tf32(torch.device("cuda"))
        assert torch.get_float32_matmul_precision() == "high"
        assert torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.set_float32_matmul_precision("highest")
    precision.allow_tf32(torch.device("cpu"))  # nothing on a CPU
    assert torch.get_float32_matmul_precision() == "highest"


def test_auto_on_a_cpu_is_float32_and_a_setting_is_taken_as_it_is():
    cpu = torch.device("cpu")
    assert precision.choose_precision("auto", cpu).name == "fp32"
    for setting in ("bf16", "fp16", "fp32"):
        chosen = precision.choose_precision(setting, cpu)
        assert chosen.name == setting and chosen.why.startswith(f"trainer.amp={setting}")
    assert "float16: largest 65504" in precision.choose_precision("fp16", cpu).why


@pytest.mark.parametrize(
    "here, other, chosen",
    [(True, True, "bf16"), (False, False, "fp16"), (True, False, "fp16"), (False, True, "fp16")],
)
def test_auto_on_gpus_takes_bf16_only_where_every_rank_has_it_else_fp16_with_scaling(
    monkeypatch, here, other, chosen
):
    """A mixed allocation, faked: this rank's GPU answers `here`, rank 1's `other`."""
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation: here)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)

    def all_gather_object(answers, mine):
        answers[:] = [mine, other]

    monkeypatch.setattr(dist, "all_gather_object", all_gather_object)
    monkeypatch.setattr(precision, "allow_tf32", lambda device: None)  # no GPU here
    result = precision.choose_precision("auto", torch.device("cuda"))
    assert result.name == chosen
    lacking = [str(rank) for rank, has in enumerate((here, other)) if not has]
    if lacking:
        assert f"the GPU of rank(s) {', '.join(lacking)} has no bf16" in result.why


def test_a_snapshot_of_another_text_or_other_settings_is_refused_in_one_line():
    """Compared: config.shaping_settings (the model's and the optimizer's among them) and
    the precision. (A finished run relaunched with another trainer.max_steps: the notebook.)"""
    path = REPO / "snapshot.pt"  # only named in the messages

    def settings(amp: str, *overrides: str) -> dict:
        config = lesson_config.load_config(CONFIG, list(overrides))
        return {**lesson_config.shaping_settings(config), "trainer.amp": amp}

    state = {"chars": "abc", "settings": settings("bf16")}
    snapshots.check_snapshot(state, "abc", settings("bf16"), path)  # the same: resumed
    with pytest.raises(SnapshotError, match="was trained on another text"):
        snapshots.check_snapshot(state, "abd", settings("bf16"), path)
    changed = settings("fp32", "model.n_embd=64", "optimizer.lr=0.001", "trainer.batch_size=4")
    with pytest.raises(SnapshotError) as refused:  # the micro-batch size may change
        snapshots.check_snapshot(state, "abc", changed, path)
    assert str(refused.value) == (
        f"snapshot {path} was trained with other settings (model.n_embd=128 -> 64, "
        "optimizer.lr=0.003 -> 0.001, trainer.amp='bf16' -> 'fp32'); resume with its "
        "settings, or delete it to start from scratch"
    )


def plan(*overrides: str):
    """The config, 5 warm-up steps, `overrides`: its plan for 1000 windows (15 x 64, 3 epochs)."""
    overrides = ["optimizer.warmup_steps=5", *overrides]
    config = lesson_config.load_config(CONFIG, overrides)
    return config, schedule.count_steps(config, 1000)


def test_max_steps_stops_the_run_but_leaves_its_schedule_alone():
    config, full = plan()
    _, preview = plan("trainer.max_steps=20")
    assert full == (15, 45) and preview == (15, 20)
    opt = config.optimizer
    rates = [schedule.learning_rate(opt, step, 45) for step in range(60)]
    assert rates[44] > opt.min_lr and rates[45:] == [opt.min_lr] * 15  # then min_lr, flat
    assert rates[4] == max(rates) == opt.lr and rates == sorted(rates[:5]) + rates[5:]
    assert rates[5:] == sorted(rates[5:], reverse=True)
    with pytest.raises(lesson_config.ConfigError, match="not shorter than the schedule"):
        plan("optimizer.warmup_steps=45")


def test_a_fresh_run_starts_an_empty_metrics_file(tmp_path):
    path = tmp_path / "runs" / "metrics.jsonl"
    snapshots.keep_metrics_up_to(path, None)
    assert path.read_text() == ""
    rows = ['{"kind": "val", "step": 0}', '{"kind": "train", "step": 10}', '{"kind": "tr']
    path.write_text("\n".join(rows))
    snapshots.keep_metrics_up_to(path, 0)  # a resume from step 0's snapshot keeps step 0
    assert path.read_text() == rows[0] + "\n"
    path.write_text("\n".join(rows))
    snapshots.keep_metrics_up_to(path, None)  # an old run's rows, even its step 0, go
    assert path.read_text() == ""


def test_an_interval_whose_fp16_steps_all_overflowed_writes_strict_json(monkeypatch):
    """No finite gradient norm to average: the line must still parse as JSON (no Infinity)."""
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
