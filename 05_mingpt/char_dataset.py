"""Lesson 05: the characters of a text, cut into training examples.

Used by `main.py` (see its docstring for the commands that launch the lesson).

The default corpus needs no download: the documentation topics that every CPython
ships in `pydoc_data.topics` (the text behind `help("for")`): a few hundred thousand
characters, how many depending on the Python version. Any UTF-8 text file works
instead (`--data FILE`).

Every rank builds the very same dataset and the very same split: the text is cut
into non-overlapping chunks, and a generator seeded from the config, not the global
random state, decides which chunks are held out for validation. (The official
series splits with an unseeded `random_split`, so each rank validates on chunks that
another rank trains on.) Sharding the training chunks between ranks is the job of
the DistributedSampler.
"""

import math
from pathlib import Path

import torch
from torch.utils.data import Dataset, Subset, random_split


class DataError(Exception):
    """The text cannot be used for training; the message is one line that says why."""


def load_text(path: str | None) -> tuple[str, str]:
    """(text, where it came from): the file at `path`, or the pydoc topics."""
    if path is None:
        from pydoc_data.topics import topics

        # Sorted by topic name so the text is the same whatever the dict order.
        return "\n".join(topics[name] for name in sorted(topics)), "pydoc_data.topics"
    file = Path(path)
    if not file.is_file():
        raise DataError(f"--data {path}: no such file")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise DataError(
            f"--data {path}: not UTF-8 text (byte {error.start} cannot be decoded)"
        ) from None
    if not text:
        raise DataError(f"--data {path}: the file is empty")
    return text, str(file)


class CharDataset(Dataset):
    """Chunks of `block_size + 1` characters as (input, target) pairs, the target
    being the input shifted by one character."""

    def __init__(self, text: str, block_size: int):
        self.chars = "".join(sorted(set(text)))
        self.index_of = {char: index for index, char in enumerate(self.chars)}
        self.data = torch.tensor([self.index_of[char] for char in text], dtype=torch.long)
        self.block_size = block_size

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def __len__(self) -> int:
        # Chunk i covers characters [i*block_size, (i+1)*block_size]: neighbours share
        # only their boundary character.
        return (len(self.data) - 1) // self.block_size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = index * self.block_size
        chunk = self.data[start : start + self.block_size + 1]
        return chunk[:-1], chunk[1:]

    def encode(self, text: str) -> torch.Tensor:
        unknown = sorted(set(text) - set(self.chars))
        if unknown:
            raise DataError(
                f"{text!r} has characters that the training text lacks: {''.join(unknown)!r}"
            )
        return torch.tensor([self.index_of[char] for char in text], dtype=torch.long)

    def decode(self, indices) -> str:
        return "".join(self.chars[int(index)] for index in indices)


def build_datasets(
    path: str | None, block_size: int, val_fraction: float, split_seed: int
) -> tuple[CharDataset, Subset, Subset, str]:
    """(the whole dataset, its training part, its validation part, the source name)."""
    text, source = load_text(path)
    dataset = CharDataset(text, block_size)
    n_val = int(len(dataset) * val_fraction)
    n_train = len(dataset) - n_val
    if n_val < 1 or n_train < 1:
        needed = block_size * max(math.ceil(1 / val_fraction), 2) + 1
        raise DataError(
            f"{source} is too short: {len(text)} characters make {len(dataset)} chunks of "
            f"{block_size}, too few to hold out {val_fraction:g} for validation; give at "
            f"least {needed} characters or a smaller data.block_size"
        )
    generator = torch.Generator().manual_seed(split_seed)
    train, val = random_split(dataset, [n_train, n_val], generator=generator)
    return dataset, train, val, source
