"""Lesson 05: how much of the hardware the training uses (model FLOPs utilization).

Used by `trainer.py` (see main.py's docstring for the commands that launch the lesson).

A transformer's training step costs about 6 floating-point operations per token for
each weight that multiplies (2 in the forward pass, a multiply and an add; 4 in the
backward, for the gradients of both the inputs and the weight), plus attention's own
products, which grow with the context: 12 x layers x width x context per token
(Kaplan et al. 2020; PaLM, appendix B). The embedding tables are looked up, not
multiplied: they cost no FLOPs, and counting them (as a sum over all parameters
does) would overstate the MFU. Biases and LayerNorm are additions, left out too.
Multiplied by the tokens per second, it gives the FLOP/s the model does; divided by
the peak FLOP/s of the hardware, the MFU. `tests/test_05_model.py` checks the count
against PyTorch's own FLOP counter on a forward and backward pass of this model.

The peak is the datasheet's (dense, in the precision trained in) when you state it as
`trainer.peak_tflops` (per process: one GPU's). Without it, every process times a
large matrix product of its own at the start: the speed this machine reaches in
practice, not a datasheet figure, so an MFU against it reads higher than one against
a datasheet would.
"""

import time

import torch
from torch import nn


def multiplied_weights(model: nn.Module) -> int:
    """The weights of the model's matrix products: every linear layer's matrix (the
    output layer's included), no embedding table, bias or LayerNorm gain."""
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))


def flops_per_token(weights: int, n_layer: int, n_embd: int, block_size: int) -> int:
    """Training FLOPs per token: 6 per multiplied weight, plus attention's scores and
    weighted sums over the whole context (the causal half included, as PaLM counts)."""
    return 6 * weights + 12 * n_layer * n_embd * block_size


def model_flops_per_token(model: nn.Module, block_size: int) -> int:
    """`flops_per_token` of the lesson's GPT (model.py), read off the model itself."""
    shape = model.shape
    return flops_per_token(multiplied_weights(model), shape.n_layer, shape.n_embd, block_size)


def peak_flops(device: torch.device, dtype: torch.dtype | None) -> float:
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
