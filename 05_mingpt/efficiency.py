"""Lesson 05: how much of the hardware the training uses (model FLOPs utilization).

Used by `trainer.py` (see main.py's docstring for the commands that launch the lesson).

A transformer's training step costs about 6 floating-point operations per parameter
and token (2 in the forward pass, 4 in the backward: a multiply and an add for each
weight, twice as many for the gradients of both inputs and weights), plus attention's
own products, which grow with the context: 12 x layers x width x context per token
(Kaplan et al. 2020; PaLM, appendix B). Multiplied by the tokens per second, it gives
the FLOP/s the model does; divided by the peak FLOP/s of the hardware, the MFU.

The peak is the datasheet's (dense, in the precision trained in) when you state it as
`trainer.peak_tflops` (per process: one GPU's). Without it, every process times a
large matrix product of its own at the start: the speed this machine reaches in
practice, not a datasheet figure, so an MFU against it reads higher than one against
a datasheet would.
"""

import time

import torch


def flops_per_token(parameters: int, n_layer: int, n_embd: int, block_size: int) -> int:
    """Training FLOPs per token: 6 per parameter, plus attention's scores and sums."""
    return 6 * parameters + 12 * n_layer * n_embd * block_size


def measured_peak_flops(device: torch.device, dtype: torch.dtype | None) -> float:
    """FLOP/s of the fastest of a few square matrix products on `device`, large enough
    to keep it busy (a GPU needs far larger ones than a CPU core)."""
    size, dtype = (4096 if device.type == "cuda" else 1024), dtype or torch.float32
    generator = torch.Generator(device).manual_seed(0)  # not the global random stream
    a = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    b = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    fastest = float("inf")
    for attempt in range(4):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        for _ in range(4):
            a @ b
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if attempt:  # the first one warms up
            fastest = min(fastest, (time.perf_counter() - start) / 4)
    return 2 * size**3 / fastest
