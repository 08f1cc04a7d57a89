"""A lesson line that needs a newer PyTorch than the one installed says so in one line.

The course runs on PyTorch 2.13 to 2.15 (requirements.txt). A cluster often has an older
release, and most of the course runs there too: the GPU mode ran it on 2.11
(docs/results.md). The few places that use something newer call `needs_torch` first,
so that an older PyTorch stops there with what is missing instead of a traceback.
"""

import sys

import torch

# What the exit line starts with after the script's name: the GPU mode counts these.
NEEDS = "needs PyTorch"


def release(version: str) -> tuple[int, int]:
    """(major, minor) of a version such as '2.11.0+cu130'."""
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def needs_torch(minimum: str, what: str) -> None:
    """Exit with one line when this PyTorch is older than `minimum` ('2.13')."""
    if release(torch.__version__) < release(minimum):
        sys.exit(
            f"{what} {NEEDS} {minimum} or newer; this is {torch.__version__}: "
            f"pip install 'torch>={minimum}' (requirements.txt)"
        )
