"""Lesson 05: a small GPT, causal by construction.

Used by `main.py` (see its docstring for the commands that launch the lesson).

What differs from the minGPT of the official series, and why:

- attention calls `F.scaled_dot_product_attention(..., is_causal=True)`: position t
  can only attend to positions <= t, whatever the input. (The series builds a float
  mask and *adds* it to the scores, so the model can see the future.) A test changes
  the tokens after position t and checks that the logits up to t do not move;
- the optimizer has two parameter groups: weight decay for the matrices of the
  linear layers, none for biases, LayerNorm and the embedding tables;
- `generate` samples with a temperature and top-k from a generator of its own, so a
  sample is reproducible and does not disturb the training's random stream.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class GPTShape:
    """The numbers that fix a model's architecture (vocab_size comes from the data)."""

    vocab_size: int
    block_size: int
    n_layer: int
    n_head: int
    n_embd: int
    dropout: float = 0.0
    tie_weights: bool = False  # the output layer uses the token embedding's matrix


class CausalSelfAttention(nn.Module):
    def __init__(self, shape: GPTShape):
        super().__init__()
        self.n_head = shape.n_head
        self.qkv = nn.Linear(shape.n_embd, 3 * shape.n_embd)
        self.proj = nn.Linear(shape.n_embd, shape.n_embd)
        self.dropout = shape.dropout
        self.resid_dropout = nn.Dropout(shape.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, time, channels = x.shape
        q, k, v = self.qkv(x).split(channels, dim=2)
        # (batch, time, channels) -> (batch, heads, time, channels per head)
        q, k, v = (t.view(batch, time, self.n_head, -1).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        y = y.transpose(1, 2).reshape(batch, time, channels)
        return self.resid_dropout(self.proj(y))


class MLP(nn.Module):
    def __init__(self, shape: GPTShape):
        super().__init__()
        self.fc = nn.Linear(shape.n_embd, 4 * shape.n_embd)
        self.proj = nn.Linear(4 * shape.n_embd, shape.n_embd)
        self.dropout = nn.Dropout(shape.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    """Pre-norm transformer block: x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, shape: GPTShape):
        super().__init__()
        self.ln_1 = nn.LayerNorm(shape.n_embd)
        self.attn = CausalSelfAttention(shape)
        self.ln_2 = nn.LayerNorm(shape.n_embd)
        self.mlp = MLP(shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, shape: GPTShape):
        super().__init__()
        self.shape = shape
        self.token_embedding = nn.Embedding(shape.vocab_size, shape.n_embd)
        self.position_embedding = nn.Embedding(shape.block_size, shape.n_embd)
        self.dropout = nn.Dropout(shape.dropout)
        self.blocks = nn.ModuleList(Block(shape) for _ in range(shape.n_layer))
        self.ln_f = nn.LayerNorm(shape.n_embd)
        self.lm_head = nn.Linear(shape.n_embd, shape.vocab_size, bias=False)
        if shape.tie_weights:
            # One matrix reads characters in and scores them out (GPT-2 does this): fewer
            # parameters by vocab_size x n_embd, the same products, so the same FLOPs.
            self.lm_head.weight = self.token_embedding.weight
        self.apply(self._init_weights)
        # Every block adds its output projections to the residual stream; scaling them
        # down keeps the stream's variance from growing with depth (as in GPT-2).
        for name, parameter in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(parameter, mean=0.0, std=0.02 / math.sqrt(2 * shape.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """Logits of shape (batch, time, vocab); with `targets`, also the mean
        cross-entropy in nats per character."""
        time = idx.shape[1]
        if time > self.shape.block_size:
            raise ValueError(f"sequence of {time} tokens > block_size {self.shape.block_size}")
        positions = torch.arange(time, device=idx.device)
        x = self.dropout(self.token_embedding(idx) + self.position_embedding(positions))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits, None
        # The loss in float32 even under autocast: a bf16 log-softmax loses digits.
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        return logits, loss

    def optimizer_groups(self, weight_decay: float) -> list[dict]:
        """Decay the matrices of linear layers; not biases, LayerNorm gains or the
        embedding tables (decay would pull rarely seen characters' rows to zero)."""
        matrices = {id(m.weight) for m in self.modules() if isinstance(m, nn.Linear)}
        decay, no_decay = [], []
        for parameter in self.parameters():  # a tied matrix once: it is a linear layer's
            (decay if id(parameter) in matrices else no_decay).append(parameter)
        return [
            {"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Append `max_new_tokens` sampled tokens to `idx` (batch, time).

        Lower temperature sharpens the distribution; top-k keeps only the k likeliest
        tokens. `generator` makes the sample reproducible.
        """
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        was_training = self.training
        self.eval()
        for _ in range(max_new_tokens):
            context = idx[:, -self.shape.block_size :]
            logits, _ = self(context)
            logits = logits[:, -1, :].float() / temperature
            if top_k is not None:
                kth_largest = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]
                logits = logits.masked_fill(logits < kth_largest, float("-inf"))
            probabilities = F.softmax(logits, dim=-1)
            next_token = torch.multinomial(probabilities, 1, generator=generator)
            idx = torch.cat([idx, next_token], dim=1)
        self.train(was_training)
        return idx
