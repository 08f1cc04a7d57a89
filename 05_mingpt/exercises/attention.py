"""Exercise 05 · attention: causal self-attention by hand.

`model.py` calls `F.scaled_dot_product_attention(q, k, v, is_causal=True)`. Here you
write what it computes, for q, k, v of shape (batch, heads, time, head_size):

1. the scores: every query against every key, `q @ k.transpose(-2, -1)`, divided by
   the square root of head_size (so that the softmax does not saturate as head_size
   grows);
2. the causal mask: position t may attend to positions 0..t only. Set the scores of
   the future (key position > query position) to minus infinity, so the softmax gives
   them weight 0. (The official minGPT adds a float mask of ones and zeros instead:
   adding 0 or 1 to a score hides nothing, and its model sees the future);
3. the softmax over the keys, then the weighted sum of the values: `weights @ v`.

Task: write `causal_attention`. The check changes the keys and values after position
t and asserts that the outputs up to t stay the same (causality), then compares with
`scaled_dot_product_attention(..., is_causal=True)` on several shapes.
Hint: `torch.ones(time, time, dtype=torch.bool, device=q.device).triu(diagonal=1)` is
True exactly for the future (made on q's device, where the scores are);
`scores.masked_fill(mask, float("-inf"))`.
"""

import torch


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal self-attention of (batch, heads, time, head_size) tensors; same shape out."""
    time, head_size = q.shape[-2], q.shape[-1]
    # TODO: scores scaled by head_size ** -0.5, the future masked with -inf, softmax, @ v.
    raise NotImplementedError(f"causal_attention over {time} positions of size {head_size}")
