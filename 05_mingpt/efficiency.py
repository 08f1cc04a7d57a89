"""Lesson 05: the training FLOPs per token of the lesson's GPT.

Not on the training path (the progress lines give tokens/s): it states what a token of
this model costs. tests/test_05_practice.py checks it against PyTorch's own FLOP
counter, and tests/test_01_at_scale.py checks lesson 01's at-scale GPT shapes against it.

A transformer's training step costs about 6 floating-point operations per token for each
weight that multiplies (2 in the forward pass, a multiply and an add; 4 in the backward,
for the gradients of both the inputs and the weight), plus attention's own products,
which grow with the context: 12 x layers x width x context per token, as PaLM counts
them (Chowdhery et al. 2022, appendix B): scores and weighted sums over the whole
context, the masked half included. Kaplan et al. 2020 (table 1) count half of that, 2 x
layers x context x width per token in the forward pass, so 6 x layers x context x width
in training. The embedding tables are looked up, not multiplied: they cost no FLOPs, and
counting them (as a sum over all parameters does) would overstate them. Biases and
LayerNorm are additions, left out too. Times tokens per second, over the hardware's peak
FLOP/s, it gives the model FLOPs utilization (MFU).
"""

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
