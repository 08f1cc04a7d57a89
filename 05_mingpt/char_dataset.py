"""Lesson 05: the characters of a text, cut into training examples.

Used by `main.py` (see its docstring for the commands that launch the lesson).

The default corpus needs no download: the documentation topics that every CPython
ships in `pydoc_data.topics` (the text behind `help("for")`): a few hundred thousand
characters, how many depending on the Python version. Any UTF-8 text file works
instead (`--data FILE`).

The split is contiguous: the first part of the text trains, the last
`val_fraction` validates, so no validation window shares a sentence with a training
one. Training windows start at random offsets, as minGPT's do (it takes every offset,
so consecutive examples overlap): an epoch is as many windows as the training text
has blocks, each at an offset drawn from (seed, epoch, the window's global index). So
every rank computes the same offsets on its own, and which text a step trains on
does not depend on how the step is split among ranks and micro-batches: the
DistributedSampler only decides which rank takes which global index. (Per-rank
random streams would give each rank other windows, and a world of 4 would train on
other text than a world of 2.) Validation windows are fixed and do not overlap.
"""

import math
from pathlib import Path
from typing import NamedTuple

import torch
from torch.utils.data import Dataset


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


class Vocabulary:
    """The characters of a text, each with its index."""

    def __init__(self, text: str):
        self.chars = "".join(sorted(set(text)))
        self.index_of = {char: index for index, char in enumerate(self.chars)}

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> torch.Tensor:
        unknown = sorted(set(text) - set(self.chars))
        if unknown:
            raise DataError(
                f"{text!r} has characters that the training text lacks: {''.join(unknown)!r}"
            )
        return torch.tensor([self.index_of[char] for char in text], dtype=torch.long)

    def decode(self, indices) -> str:
        return "".join(self.chars[int(index)] for index in indices)


class RandomWindows(Dataset):
    """Training examples: windows of `block_size + 1` characters of `data` at random
    offsets, as (input, target), the target being the input shifted by one character.
    Call `set_epoch` before each epoch (every rank, the same epoch)."""

    def __init__(self, data: torch.Tensor, block_size: int, seed: int):
        self.data, self.block_size, self.seed = data, block_size, seed
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        # One generator per (seed, epoch), drawing every offset of the epoch at once:
        # offset i depends on the seed, the epoch and i alone. (The factor keeps the
        # seeds of (seed, epoch) pairs apart for any epoch below it.)
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        highest = len(self.data) - self.block_size - 1  # the last window that fits
        self.offsets = torch.randint(0, highest + 1, (len(self),), generator=generator)

    def __len__(self) -> int:
        return (len(self.data) - 1) // self.block_size  # windows per epoch

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = int(self.offsets[index])
        window = self.data[start : start + self.block_size + 1]
        return window[:-1], window[1:]


class FixedWindows(Dataset):
    """Validation examples: consecutive windows that share only a boundary character."""

    def __init__(self, data: torch.Tensor, block_size: int):
        self.data, self.block_size = data, block_size

    def __len__(self) -> int:
        return (len(self.data) - 1) // self.block_size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = index * self.block_size
        window = self.data[start : start + self.block_size + 1]
        return window[:-1], window[1:]


class TextData(NamedTuple):
    vocabulary: Vocabulary
    train_set: RandomWindows
    val_set: FixedWindows
    source: str  # the file, or pydoc_data.topics


def build_datasets(path: str | None, block_size: int, val_fraction: float, seed: int) -> TextData:
    """The text's vocabulary, training windows and validation windows."""
    text, source = load_text(path)
    vocabulary = Vocabulary(text)
    data = torch.tensor([vocabulary.index_of[char] for char in text], dtype=torch.long)
    n_val = int(len(data) * val_fraction)
    train_data, val_data = data[: len(data) - n_val], data[len(data) - n_val :]
    if min(len(train_data), len(val_data)) < block_size + 1:  # not one window each
        needed = math.ceil((block_size + 1) / min(val_fraction, 1 - val_fraction)) + 1
        raise DataError(
            f"{source} is too short: {len(text)} characters hold out {n_val} for validation "
            f"({val_fraction:g}), too few for windows of {block_size}; give at least "
            f"{needed} characters or a smaller data.block_size"
        )
    train = RandomWindows(train_data, block_size, seed)
    return TextData(vocabulary, train, FixedWindows(val_data, block_size), source)
