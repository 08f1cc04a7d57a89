"""Lesson 05: which precision the training computes in (`trainer.amp`).

Used by `trainer.py` (see main.py's docstring for the commands that launch the lesson).

- `bf16`: autocast to bfloat16. It has float32's exponent range (the same smallest
  normal number, 2^-126), so gradients underflow no sooner than in float32, and no
  loss scaling is needed.
- `fp16`: autocast to float16, whose exponent range is narrow. Below its smallest
  normal number, 2^-14 (about 6.1e-5), values are subnormal: spaced 2^-24 (about
  6e-8) apart, the smallest subnormal, so the smaller a gradient the fewer significant
  bits it keeps; at half of 2^-24 or below it rounds to 0. `float16_range()` reads these
  limits from `torch.finfo`, and the fp16 choice logs them. A GradScaler multiplies
  the loss (by its `init_scale`, 2^16 unless told otherwise) before the backward pass,
  which lifts small gradients out of the subnormal range, divides the gradients back
  before the optimizer uses them, and skips a step whose gradients overflowed (past
  65504, the largest float16), lowering the scale.
- `off`: float32 throughout.
- `auto`: on GPUs, bf16 where every GPU of the job supports it (NVIDIA from Ampere
  on), else fp16 with the scaler, on every rank: a job given GPUs of several models (a
  mixed allocation) trains in the precision its least capable GPU has. Ranks in
  different precisions would average fp16's scaled gradients with bf16's unscaled
  ones, and only the fp16 ranks would skip a step that overflowed: the replicas would
  drift apart. On a CPU, whichever of bf16 and float32 runs a training step of this
  model faster here, measured at the start: a CPU without bf16 instructions converts
  every bf16 number to float32 and back, and is slower in bf16, not faster.
  bf16 must win by 10% to be chosen, since float32 is the more accurate of the two.

`auto` is decided once, when a run starts: the snapshot stores the precision it
chose, and a resume with `auto` takes it from there (a timing could choose the other
one, and the resumed run would no longer equal the uninterrupted one). An explicit
setting other than the snapshot's is refused unless `--resume_with_new_config`.

On a GPU, float32 matrix products also use TF32 (10 bits of mantissa on the tensor
cores, several times faster; Ampere on): what PyTorch's documentation recommends for
training, where the difference is far below the noise of SGD.
"""

import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from common.snapshot import SnapshotError

BF16_MUST_WIN_BY = 0.9  # bf16 chosen on a CPU if its step takes < 90% of float32's


@dataclass
class Precision:
    dtype: torch.dtype | None  # the autocast dtype; None: float32, no autocast
    loss_scaling: bool  # fp16 only: a GradScaler is on
    why: str  # one line, for the log

    @property
    def name(self) -> str:
        return {None: "off", torch.bfloat16: "bf16", torch.float16: "fp16"}[self.dtype]

    def autocast(self, device: torch.device):
        return torch.autocast(device.type, dtype=self.dtype, enabled=self.dtype is not None)


def float16_range() -> str:
    """float16's limits, read from this PyTorch: the numbers the docstring uses."""
    info = torch.finfo(torch.float16)
    zero = torch.zeros((), dtype=torch.float16)
    subnormal = torch.nextafter(zero, torch.ones_like(zero)).item()  # the next after 0
    return (
        f"float16: largest {info.max:g}, smallest normal {info.smallest_normal:.2g} "
        f"(2^{math.log2(info.smallest_normal):.0f}), smallest subnormal {subnormal:.2g} "
        f"(2^{math.log2(subnormal):.0f})"
    )


def allow_tf32(device: torch.device) -> None:
    """TF32 for float32 matrix products on a GPU (convolutions use it by default already,
    matrix products do not). Through `set_float32_matmul_precision`, the API that
    `get_float32_matmul_precision` reads: torch.compile's autotuning calls that getter,
    and it raises once the per-backend `fp32_precision` flags were set instead (this
    PyTorch refuses to read a mix of the two APIs; tests/test_05_model.py shows it)."""
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high")


FIXED = {"bf16": torch.bfloat16, "fp16": torch.float16, "off": None}


def fixed_precision(name: str, why: str) -> Precision:
    dtype = FIXED[name]
    fp16 = dtype == torch.float16
    return Precision(dtype, fp16, f"{why}; {float16_range()}" if fp16 else why)


def choose_precision(setting: str, device: torch.device, model, inputs, targets) -> Precision:
    """The precision for `setting` (auto | bf16 | fp16 | off), the same on every rank.
    `auto` is a collective (every rank must call it, and all decide alike): on GPUs the
    ranks share whether theirs has bf16; on a CPU they time training steps of `model`
    on one batch and sum the timings over ranks."""
    if setting in FIXED:
        return fixed_precision(setting, f"trainer.amp={setting}")
    if device.type == "cuda":
        # Each rank can only ask its own GPU, and one job may hold GPUs of several models.
        has_bf16 = [None] * dist.get_world_size()
        dist.all_gather_object(has_bf16, torch.cuda.is_bf16_supported(including_emulation=False))
        if all(has_bf16):
            return Precision(torch.bfloat16, False, "auto: every GPU of this job computes in bf16")
        lacking = ", ".join(str(rank) for rank, has in enumerate(has_bf16) if not has)
        why = (
            f"auto: the GPU of rank(s) {lacking} has no bf16: fp16 with loss scaling on "
            f"every rank; {float16_range()}"
        )
        return Precision(torch.float16, True, why)
    seconds = torch.tensor(
        [_step_seconds(model, inputs, targets, d) for d in (None, torch.bfloat16)]
    )
    dist.all_reduce(seconds)  # the same numbers on every rank, so the same choice
    float32, bf16 = (seconds / dist.get_world_size()).tolist()
    timing = f"a step takes {1000 * float32:.0f} ms in float32, {1000 * bf16:.0f} ms in bf16"
    if bf16 < BF16_MUST_WIN_BY * float32:
        return Precision(torch.bfloat16, False, f"auto on this CPU: bf16 ({timing})")
    return Precision(None, False, f"auto on this CPU: float32 ({timing})")


def _step_seconds(model, inputs, targets, dtype, steps: int = 3) -> float:
    """The fastest of `steps` forward and backward passes (after one to warm up); the
    gradients are thrown away."""
    fastest = float("inf")
    for attempt in range(steps + 1):
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            _, loss = model(inputs, targets)
        loss.backward()
        if attempt:
            fastest = min(fastest, time.perf_counter() - start)
    model.zero_grad(set_to_none=True)
    return fastest


def precision_and_scaler(setting: str, device: torch.device, model, loader, state: dict | None,
                         accept_changes: bool, path: Path):  # fmt: skip
    """(Precision, GradScaler, a notice or None) for a fresh run (`state` None: chosen
    now) or a resume of the snapshot `state` at `path`."""
    allow_tf32(device)
    notice = None
    if state is not None:  # decided when the run started (the docstring says why)
        precision, notice = resumed_precision(state, setting, accept_changes, path)
    else:
        inputs, targets = (t.to(device) for t in next(iter(loader)))
        with torch.random.fork_rng(devices=[]):  # timing must not move dropout's stream
            precision = choose_precision(setting, device, model, inputs, targets)
    # fp16 needs loss scaling (small gradients go subnormal or to 0: see above); bf16
    # has float32's range and does not. A disabled scaler changes nothing.
    scaler = torch.amp.GradScaler(device.type, enabled=precision.loss_scaling)
    if state is not None and notice is None and state["scaler"]:
        scaler.load_state_dict(state["scaler"])  # the scale and its growth counter
    return precision, scaler, notice


def resumed_precision(state: dict, setting: str, accept_changes: bool,
                      path: Path) -> tuple[Precision, str | None]:  # fmt: skip
    """The precision a resume trains in: the snapshot's, unless another one is asked for
    with --resume_with_new_config (then with a notice when the loss scaling changes)."""
    saved = state["precision"]
    if setting in ("auto", saved):
        why = f"{saved}, the snapshot's (trainer.amp={setting})"
        return fixed_precision(saved, why), None
    if not accept_changes:
        raise SnapshotError(
            f"snapshot {path} trained in {'float32' if saved == 'off' else saved}; "
            f"trainer.amp={setting} would finish it in "
            f"another precision: resume with trainer.amp={saved} (or auto), or pass "
            "--resume_with_new_config"
        )
    precision = fixed_precision(setting, f"trainer.amp={setting} (the snapshot's: {saved})")
    return precision, scaler_notice(state["scaler"], precision.loss_scaling, setting)


def scaler_notice(saved_state: dict, scaler_enabled: bool, precision: str) -> str | None:
    """A notice when the snapshot's GradScaler state does not fit this run's precision
    (an empty state comes from a disabled scaler: bf16 or float32)."""
    if saved_state and not scaler_enabled:
        return (
            f"the snapshot trained in fp16 with loss scaling (scale {saved_state['scale']:g}); "
            f"{precision} needs none: its scaler state is dropped"
        )
    if not saved_state and scaler_enabled:
        return "the snapshot trained without loss scaling: fp16 starts a new GradScaler"
    return None
