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
- `auto`: on a GPU, bf16 where the GPU supports it (NVIDIA from Ampere on), else fp16
  with the scaler. On a CPU, whichever of bf16 and float32 runs a training step of
  this model faster here, measured at the start: a CPU without bf16 instructions
  converts every bf16 number to float32 and back, and is slower in bf16, not faster.
  bf16 must win by 10% to be chosen, since float32 is the more accurate of the two.

On a GPU, float32 matrix products also use TF32 (10 bits of mantissa on the tensor
cores, several times faster; Ampere on): what PyTorch's documentation recommends for
training, where the difference is far below the noise of SGD.
"""

import math
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

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
    """TF32 for float32 matrix products on a GPU (convolutions use it by default already;
    matrix products do not: `torch.backends.cuda.matmul.fp32_precision` is "none")."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.fp32_precision = "tf32"


def choose_precision(setting: str, device: torch.device, model, inputs, targets) -> Precision:
    """The precision for `setting` (auto | bf16 | fp16 | off), the same on every rank.
    `auto` on a CPU times training steps of `model` on one batch (every rank must
    call it: the timings are summed over ranks so that all decide alike)."""
    fixed = {"bf16": torch.bfloat16, "fp16": torch.float16, "off": None}
    if setting in fixed:
        dtype = fixed[setting]
        fp16 = dtype == torch.float16
        why = f"trainer.amp={setting}; {float16_range()}" if fp16 else f"trainer.amp={setting}"
        return Precision(dtype, fp16, why)
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported(including_emulation=False):
            return Precision(torch.bfloat16, False, "auto: this GPU computes in bf16")
        why = f"auto: this GPU has no bf16: fp16 with loss scaling; {float16_range()}"
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
