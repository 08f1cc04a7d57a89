"""Lesson 05: the plan of a run: how each process splits the global batch, how many
steps the run has, and the learning rate at each step.

Used by `trainer.py` and `main.py` (see main.py's docstring for the commands that
launch the lesson). None of it depends on the number of processes except the split.
"""

import math
from typing import NamedTuple

from config import Config, ConfigError, OptimizerConfig


class Plan(NamedTuple):
    steps_per_epoch: int
    total_steps: int  # where the run stops: every epoch, or trainer.max_steps
    decay_steps: int  # the learning rate's schedule: warm-up and cosine decay


def micro_batching(config: Config, world_size: int) -> tuple[int, int]:
    """(sequences per micro-batch, micro-batches per step) of each process, or
    ConfigError. The global batch is fixed; each process takes its share in as few
    micro-batches as fit: of the largest size that divides the share and is at most
    trainer.batch_size (what a process can hold at once). `small_micro_batches` says
    when that size is far below trainer.batch_size."""
    settings = config.trainer
    share, remainder = divmod(settings.global_batch_size, world_size)
    if remainder:
        raise ConfigError(
            f"trainer.global_batch_size={settings.global_batch_size} does not divide among "
            f"{world_size} processes: use a multiple of {world_size}"
        )
    batch_size = max(d for d in range(1, settings.batch_size + 1) if share % d == 0)
    return batch_size, share // batch_size


def small_micro_batches(config: Config, world_size: int) -> str | None:
    """One line when a process's share of the global batch splits only into
    micro-batches under half of trainer.batch_size (a share of 31 has no divisor but 1
    and 31): right, but many more, slower forward passes than the setting suggests."""
    settings = config.trainer
    batch_size, micro_batches = micro_batching(config, world_size)
    if 2 * batch_size >= min(settings.batch_size, batch_size * micro_batches):
        return None
    better = world_size * settings.batch_size
    return (
        f"note: trainer.global_batch_size={settings.global_batch_size} gives each of "
        f"{world_size} process(es) {batch_size * micro_batches} sequences, which split only "
        f"into {micro_batches} micro-batches of {batch_size} (trainer.batch_size="
        f"{settings.batch_size}); a multiple of {better} would run them {settings.batch_size} "
        "at a time"
    )


def count_steps(config: Config, windows: int) -> Plan:
    """The run's plan for `windows` training windows per epoch, or ConfigError. It does
    not depend on the number of processes: main.py checks it before any process group
    forms. trainer.max_steps only stops the run early; the learning rate decays over
    optimizer.decay_steps, or over every epoch (as nanoGPT's max_iters and
    lr_decay_iters are two settings), so a short preview keeps the full run's rates."""
    settings = config.trainer
    steps_per_epoch = windows // settings.global_batch_size
    if steps_per_epoch == 0:
        raise ConfigError(
            f"the training text makes {windows} windows, fewer than one global batch "
            f"(trainer.global_batch_size={settings.global_batch_size}): use a smaller one "
            "or a longer text"
        )
    all_epochs = settings.max_epochs * steps_per_epoch
    total_steps = min(all_epochs, settings.max_steps) if settings.max_steps else all_epochs
    decay_steps = config.optimizer.decay_steps or all_epochs
    warmup = config.optimizer.warmup_steps
    if warmup >= decay_steps:
        raise ConfigError(
            f"optimizer.warmup_steps={warmup} is not shorter than the schedule ({decay_steps} "
            "steps): the learning rate would never decay"
        )
    return Plan(steps_per_epoch, total_steps, decay_steps)


def learning_rate(opt: OptimizerConfig, step: int, decay_steps: int) -> float:
    """Linear warm-up over `warmup_steps`, then cosine decay to `min_lr` at step
    `decay_steps`, and `min_lr` after it (a run trained on past its schedule)."""
    if step < opt.warmup_steps:
        return opt.lr * (step + 1) / opt.warmup_steps
    progress = min(1.0, (step - opt.warmup_steps) / max(1, decay_steps - opt.warmup_steps))
    return opt.min_lr + 0.5 * (opt.lr - opt.min_lr) * (1 + math.cos(math.pi * progress))
