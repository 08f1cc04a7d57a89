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


def scaling_model(seed: int = 0, width: int = 1024) -> nn.Module:
    """A multilayer perceptron for the same 20-feature regression, heavy enough that
    computing a step costs far more than averaging its gradients: 02_multigpu's
    scaling section times it with 1, 2 and 4 processes.

    With the default width it has about 1.07 million parameters (4.3 MB of gradients
    to all-reduce per step) and costs about 6.4 MFLOP per sample for forward and
    backward.
    """
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(IN_FEATURES, width),
        nn.ReLU(),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, 1),
    )
