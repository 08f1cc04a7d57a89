"""Models for the training lessons.

Introduced in 00_intro; used by 01_theory, 02_multigpu, 03_fault_tolerance and
04_multinode.
"""

import torch
from torch import nn

from common.data import IN_FEATURES


def regression_model(seed: int = 0) -> nn.Module:
    """The official series' model, `nn.Linear(20, 1)`, trained with mean squared error
    (not cross-entropy over one output, which is always 0 and teaches nothing).

    Its initial weights come from `seed`, so two runs that should match start equal.
    """
    torch.manual_seed(seed)
    return nn.Linear(IN_FEATURES, 1)
