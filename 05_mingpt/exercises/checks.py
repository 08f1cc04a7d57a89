"""Checks of lesson 05's coding exercises; `course.exercises.check` runs them."""

import torch
import torch.nn.functional as F

from course.exercises import load

SHAPES = ((1, 1, 1, 4), (2, 3, 5, 8), (1, 4, 16, 16), (3, 2, 33, 4))  # batch, heads, time, size


def attention(path) -> str:
    exercise = load(path)
    generator = torch.Generator().manual_seed(0)
    for shape in SHAPES:
        q, k, v = (torch.randn(shape, generator=generator) for _ in range(3))
        got = exercise.causal_attention(q, k, v)
        assert isinstance(got, torch.Tensor) and got.shape == q.shape, (
            f"shape {shape}: expected a tensor of shape {tuple(q.shape)}, got "
            f"{tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}"
        )

        # NaN first: it would read as an error of any size in the comparisons below.
        nan_at = sorted(set(got.isnan().nonzero()[:, 2].tolist()))
        assert not nan_at, (
            f"shape {shape}: the output is NaN at positions {nan_at}: a position whose "
            "scores are all -inf attends to nothing (the softmax divides 0 by 0); position t "
            "must see positions 0..t, itself included, so mask only the keys after it "
            "(triu(diagonal=1))"
        )

        # Causality: new keys and values after position t must not move outputs 0..t.
        time = shape[2]
        for t in range(time - 1):
            k2, v2 = k.clone(), v.clone()
            k2[:, :, t + 1 :] = torch.randn(k2[:, :, t + 1 :].shape, generator=generator)
            v2[:, :, t + 1 :] = torch.randn(v2[:, :, t + 1 :].shape, generator=generator)
            changed = exercise.causal_attention(q, k2, v2)
            moved = (changed[:, :, : t + 1] - got[:, :, : t + 1]).abs().max().item()
            assert moved < 1e-6, (
                f"shape {shape}: changing the keys and values after position {t} moved the "
                f"outputs at positions 0..{t} by up to {moved:.3g}: the attention sees the "
                "future (is the mask applied with -inf, before the softmax?)"
            )

        expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        error = (got - expected).abs().max().item()
        assert error < 1e-5, (
            f"shape {shape}: differs from scaled_dot_product_attention(is_causal=True) by "
            f"up to {error:.3g} (is the scale 1/sqrt(head_size), the softmax over the keys?)"
        )
    return (
        f"causal, and equal to scaled_dot_product_attention(is_causal=True) on {len(SHAPES)} shapes"
    )
