"""How far apart the ranks' copies of a tensor are: the measure behind every "the
replicas are identical" a lesson prints.

Introduced in 02_multigpu's DDP options part (`02_multigpu/ddp_options/`).
"""

import torch
import torch.distributed as dist
from torch import nn


def flat_parameters(model: nn.Module) -> torch.Tensor:
    """Every parameter of `model`, detached and flattened into one tensor."""
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def largest_difference_between_ranks(tensor: torch.Tensor) -> float:
    """The largest |this rank's value - rank 0's value| over every element and every
    rank: 0.0 when all ranks hold bit-identical tensors. A collective: every rank
    calls it, and every rank gets the same answer."""
    rank_0s = tensor.detach().clone()
    dist.broadcast(rank_0s, src=0)
    largest = (tensor.detach() - rank_0s).abs().max().to(torch.float64)
    dist.all_reduce(largest, op=dist.ReduceOp.MAX)
    return largest.item()
