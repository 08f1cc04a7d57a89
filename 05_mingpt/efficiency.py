"""Lesson 05: how much of the hardware the training uses (model FLOPs utilization).

Used by `trainer.py` (see main.py's docstring for the commands that launch the lesson).

A transformer's training step costs about 6 floating-point operations per token for each
weight that multiplies (2 in the forward pass, a multiply and an add; 4 in the backward,
for the gradients of both the inputs and the weight), plus attention's own products,
which grow with the context: 12 x layers x width x context per token, as PaLM counts
them (Chowdhery et al. 2022, appendix B): scores and weighted sums over the whole
context, the masked half included. Kaplan et al. 2020 (table 1) count half of that, 2 x
layers x context x width per token in the forward pass, so 6 x layers x context x width
in training. The embedding tables are looked up, not multiplied: they cost no FLOPs, and
counting them (as a sum over all parameters does) would overstate the MFU. Biases and
LayerNorm are additions, left out too. Multiplied by the tokens per second, it gives the
FLOP/s the model does; divided by the peak FLOP/s of the hardware, the MFU.
`tests/test_05_practice.py` checks the count against PyTorch's own FLOP counter on a
forward and backward pass of this model (with the plain attention kernel, which computes
the masked half too).

The peak is the datasheet's (dense, in the precision trained in) when you state it as
`trainer.peak_tflops` (per process: one GPU's). Without it, every process times square
matrix products of a few sizes at the start and keeps the fastest: the speed this
machine reaches in practice, not a datasheet figure, so an MFU against it reads higher
than one against a datasheet would.
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
    """FLOP/s of the fastest square matrix product on `device` in `dtype`, over sizes
    doubling from 128 until one product takes 20 ms or the size reaches 1024 on a CPU
    core (4096 on a GPU, which needs far larger ones to be kept busy).

    The fastest of several sizes, not one size: the size a device runs fastest at
    depends on the device and the precision. Measured on the 2-core AMD EPYC the course
    is tested on (PyTorch 2.14.1, one thread): float32 at 78-86 GFLOP/s from 128 to 1024,
    bf16, which that CPU lacks in hardware, at 2.8 GFLOP/s at 128 and 0.9 at 1024. A peak
    timed at 1024 alone put a bf16 run's MFU at 110-190%, and took 40 s at every start;
    tests/test_05_training.py checks a bf16 run's MFU stays under 100%."""
    dtype = dtype or torch.float32
    largest = 4096 if device.type == "cuda" else 1024
    generator = torch.Generator(device).manual_seed(0)  # not the global random stream
    fastest_flops, size = 0.0, 128
    while size <= largest:
        a = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
        b = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
        seconds = min(seconds_per_product(a, b) for _ in range(3))
        fastest_flops = max(fastest_flops, 2 * size**3 / seconds)
        if seconds > 0.02:  # large enough to keep the device busy; larger only costs time
            break
        size *= 2
    return fastest_flops


def seconds_per_product(a: torch.Tensor, b: torch.Tensor, repeats: int = 4) -> float:
    """Seconds one `a @ b` takes, averaged over `repeats` after one to warm up."""
    a @ b
    if a.device.type == "cuda":
        torch.cuda.synchronize(a.device)
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    if a.device.type == "cuda":
        torch.cuda.synchronize(a.device)
    return (time.perf_counter() - start) / repeats
