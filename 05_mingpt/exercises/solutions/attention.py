"""Solution of exercise 05 · attention (the task is in `../attention.py`)."""

import torch


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal self-attention of (batch, heads, time, head_size) tensors; same shape out."""
    time, head_size = q.shape[-2], q.shape[-1]
    scores = q @ k.transpose(-2, -1) * head_size**-0.5  # (batch, heads, time, time)
    future = torch.ones(time, time, dtype=torch.bool, device=q.device).triu(diagonal=1)
    scores = scores.masked_fill(future, float("-inf"))  # weight exactly 0 after softmax
    weights = torch.softmax(scores, dim=-1)
    return weights @ v
