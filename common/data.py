"""The synthetic dataset the training lessons learn from.

Introduced in 00_intro; used by 01_theory, 02_multigpu, 03_fault_tolerance and
04_multinode.

It has the shape of the official series' `MyTrainDataset` (20 input features, one
target) but, unlike it, it can be learned and it is the same everywhere:

- the targets follow a fixed linear rule plus a little noise, so a linear model's
  mean squared error falls from about 20 to about 0.01: the loss *visibly* falls;
- every value comes from a private generator seeded with `seed`, never from the
  global random state, so every rank, every restart and every machine builds the
  very same samples. Sharding them between ranks is the sampler's job, not the
  dataset's.
"""

import torch
from torch.utils.data import Dataset

IN_FEATURES = 20
NOISE = 0.1


class SyntheticRegression(Dataset):
    """`size` samples (x, y) with x ~ N(0, 1)^20 and y = x . w + b + noise."""

    def __init__(self, size: int = 2048, seed: int = 0):
        generator = torch.Generator().manual_seed(seed)
        self.true_weight = torch.randn(IN_FEATURES, 1, generator=generator)
        self.true_bias = torch.randn(1, generator=generator)
        self.inputs = torch.randn(size, IN_FEATURES, generator=generator)
        noise = NOISE * torch.randn(size, 1, generator=generator)
        self.targets = self.inputs @ self.true_weight + self.true_bias + noise

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inputs[index], self.targets[index]
