"""Lesson 05: the plan of a run: how each process splits the global batch, how many
steps the run has, and the learning rate at each step.

Used by `trainer.py` and `main.py` (see main.py's docstring for the commands that
launch the lesson). None of it depends on the number of processes except the split.
"""

import math

from config import Config, ConfigError, OptimizerConfig


def micro_batching(config: Config, world_size: int) -> tuple[int, int]:
    """(sequences per micro-batch, micro-batches per step) of each process, or
    ConfigError. The global batch is fixed; each process takes its share in as few
    micro-batches as fit: of the largest size that divides the share and is at most
    trainer.batch_size (what a process can hold at once)."""
    settings = config.trainer
    share, remainder = divmod(settings.global_batch_size, world_size)
    if remainder:
        raise ConfigError(
            f"trainer.global_batch_size={settings.global_batch_size} does not divide among "
            f"{world_size} processes: use a multiple of {world_size}"
        )
    batch_size = max(d for d in range(1, settings.batch_size + 1) if share % d == 0)
    return batch_size, share // batch_size


def count_steps(config: Config, windows: int) -> tuple[int, int]:
    """(steps per epoch, the step the run stops at) for `windows` training windows per
    epoch, or ConfigError. It does not depend on the number of processes: main.py checks
    it before any process group forms. trainer.max_steps only stops the run early: the
    learning rate decays over every epoch, so a short preview keeps the full run's rates."""
    settings = config.trainer
    steps_per_epoch = windows // settings.global_batch_size
    if steps_per_epoch == 0:
        raise ConfigError(
            f"the training text makes {windows} windows, fewer than one global batch "
            f"(trainer.global_batch_size={settings.global_batch_size}): use a smaller one "
            "or a longer text"
        )
    all_epochs = settings.max_epochs * steps_per_epoch
    warmup = config.optimizer.warmup_steps
    if warmup >= all_epochs:
        raise ConfigError(
            f"optimizer.warmup_steps={warmup} is not shorter than the schedule ({all_epochs} "
            "steps): the learning rate would never decay"
        )
    return steps_per_epoch, min(all_epochs, settings.max_steps or all_epochs)


def learning_rate(opt: OptimizerConfig, step: int, decay_steps: int) -> float:
    """Linear warm-up over `warmup_steps`, then cosine decay to `min_lr` at step
    `decay_steps` (the end of the last epoch)."""
    if step < opt.warmup_steps:
        return opt.lr * (step + 1) / opt.warmup_steps
    progress = min(1.0, (step - opt.warmup_steps) / max(1, decay_steps - opt.warmup_steps))
    return opt.min_lr + 0.5 * (opt.lr - opt.min_lr) * (1 + math.cos(math.pi * progress))
