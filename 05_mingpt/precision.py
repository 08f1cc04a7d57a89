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
- `fp32`: float32 throughout.
- `auto`: on GPUs, bf16 where every GPU of the job supports it (NVIDIA from Ampere
  on), else fp16 with the scaler, on every rank: ranks in different precisions would
  average fp16's scaled gradients with bf16's unscaled ones, and only the fp16 ranks
  would skip a step that overflowed. On a CPU, float32: a CPU without bf16
  instructions converts every bf16 number to float32 and back, and is slower in bf16,
  not faster (try `trainer.amp=bf16` on yours: the exercise).

The snapshot stores the precision a run trained in, and a resume in another one is
refused (snapshots.py): it would no longer equal the run that never stopped.

On a GPU, float32 matrix products also use TF32 (10 bits of mantissa on the tensor
cores, several times faster; Ampere on): what PyTorch's documentation recommends for
training, where the difference is far below the noise of SGD.
"""

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class Precision:
    dtype: torch.dtype | None  # the autocast dtype; None: float32, no autocast
    why: str  # one line, for the log

    @property
    def name(self) -> str:
        return {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[self.dtype]

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
    PyTorch refuses to read a mix of the two APIs; tests/test_05_practice.py shows it)."""
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high")


DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}


def choose_precision(setting: str, device: torch.device) -> Precision:
    """The precision for `setting` (auto | bf16 | fp16 | fp32), the same on every rank.
    On GPUs `auto` is a collective: every rank must call it."""
    allow_tf32(device)
    if setting == "auto" and device.type != "cuda":
        return Precision(None, "auto on a CPU: float32")
    if setting == "auto":
        # Each rank can only ask its own GPU, and one job may hold GPUs of several models.
        has_bf16 = [None] * dist.get_world_size()
        dist.all_gather_object(has_bf16, torch.cuda.is_bf16_supported(including_emulation=False))
        if all(has_bf16):
            return Precision(torch.bfloat16, "auto: every GPU of this job computes in bf16")
        lacking = ", ".join(str(rank) for rank, has in enumerate(has_bf16) if not has)
        why = f"auto: the GPU of rank(s) {lacking} has no bf16: fp16 with loss scaling"
        return Precision(torch.float16, f"{why} on every rank; {float16_range()}")
    why = f"trainer.amp={setting}"
    return Precision(DTYPES[setting], f"{why}; {float16_range()}" if setting == "fp16" else why)
