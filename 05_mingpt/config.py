"""Lesson 05: the run's settings, as dataclasses that OmegaConf fills from train_cfg.yaml
and from the command line. (Hydra, which the official minGPT-ddp example uses, is built
on OmegaConf.)

Used by `main.py` (see its docstring for the commands that launch the lesson).

    torchrun --standalone --nproc_per_node=2 main.py trainer.max_epochs=3 model.n_layer=2

OmegaConf checks every key and type against the dataclasses: a typo
(`trainer.max_epoch=3`) or a value of the wrong type (`optimizer.lr=fast`) stops the run
with one line naming the key, before any process group is formed; `check` adds what a
type cannot say (`model.n_head=0`). A silently ignored override is a run that did not
test what you meant.
"""

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from operator import attrgetter
from pathlib import Path

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException


class ConfigError(Exception):
    """A setting is unknown or has a bad value; the message is one line."""


class Amp(Enum):
    """The precision of training (precision.py). `fp32`, not `off`: YAML reads off as false."""

    auto = 1
    bf16 = 2
    fp16 = 3
    fp32 = 4


@dataclass
class ModelConfig:
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    tie_weights: bool = False  # the output layer shares the token embedding's matrix


@dataclass
class DataConfig:
    path: str | None = None  # None: the pydoc_data.topics text that ships with Python
    block_size: int = 64  # characters of context, and the length of each chunk
    val_fraction: float = 0.1  # the text's last part, held out whole for validation


@dataclass
class OptimizerConfig:
    lr: float = 3e-3
    min_lr: float = 3e-4  # the cosine schedule ends here, at the end of the last epoch
    warmup_steps: int = 50
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0  # max global gradient norm; 0 turns clipping off


@dataclass
class TrainerConfig:
    max_epochs: int = 3  # an epoch: as many windows as the training text has blocks
    global_batch_size: int = 64  # sequences per optimizer step, all processes together
    batch_size: int = 32  # at most this many sequences per forward pass (a micro-batch)
    max_steps: int = 0  # stop after this many optimizer steps; 0: run every epoch
    save_every: int = 1  # snapshot every this many epochs
    save_every_steps: int = 0  # and every this many steps; 0: at the ends of epochs only
    snapshot_path: str = "snapshot.pt"
    metrics_path: str = "metrics.jsonl"
    eval_every: int = 100  # steps between validation passes (and one after every epoch)
    log_every: int = 20  # steps between progress lines
    amp: Amp = Amp.auto  # auto | bf16 | fp16 | fp32: see precision.py
    compile: bool = False  # torch.compile the model before the DDP wrap
    seed: int = 1337
    sample_chars: int = 300  # characters generated at the end; 0 for none
    sample_prompt: str = "def "
    temperature: float = 0.8
    top_k: int = 10


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)


def load_config(path: str | Path, overrides: list[str]) -> Config:
    """The defaults, then the YAML file at `path`, then `section.name=value` overrides
    (values read as YAML: `3` is an int, `3e-4` a float, `false` a bool), or ConfigError."""
    try:
        merged = OmegaConf.merge(
            OmegaConf.structured(Config), OmegaConf.load(path), OmegaConf.from_dotlist(overrides)
        )
        config = OmegaConf.to_object(merged)
    except OSError as error:
        raise ConfigError(f"cannot read config {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        first_line = str(error).splitlines()[0]
        raise ConfigError(f"config {path} is not valid YAML: {first_line}") from None
    except OmegaConfBaseException as error:
        key = getattr(error, "full_key", None) or "the config"
        what = "unknown setting" if isinstance(error, ConfigKeyError) else "bad value for"
        raise ConfigError(f"{what} {key}: {str(error).splitlines()[0]}") from None
    check(config)
    return config


# What a setting must satisfy beyond its type.
POSITIVE = (
    "model.n_layer model.n_head model.n_embd data.block_size data.val_fraction optimizer.lr "
    "optimizer.beta1 optimizer.beta2 trainer.max_epochs trainer.global_batch_size "
    "trainer.batch_size trainer.save_every trainer.eval_every trainer.log_every "
    "trainer.temperature trainer.top_k"
).split()
NOT_NEGATIVE = (
    "optimizer.min_lr optimizer.warmup_steps optimizer.weight_decay optimizer.grad_clip "
    "trainer.max_steps trainer.save_every_steps trainer.sample_chars"
).split()
BELOW_ONE = "model.dropout data.val_fraction optimizer.beta1 optimizer.beta2".split()


def check(config: Config) -> None:
    """ConfigError for a value of the right type that cannot work."""
    for key in POSITIVE + NOT_NEGATIVE + BELOW_ONE:
        value = attrgetter(key)(config)
        if key in POSITIVE and not value > 0:
            raise ConfigError(f"{key}={value} must be > 0")
        if key in NOT_NEGATIVE and value < 0:
            raise ConfigError(f"{key}={value} must be >= 0")
        if key in BELOW_ONE and not 0 <= value < 1:
            raise ConfigError(f"{key}={value} must be in [0, 1)")
    model, optimizer, trainer = config.model, config.optimizer, config.trainer
    if model.n_embd % model.n_head:
        raise ConfigError(
            f"model.n_embd={model.n_embd} must be divisible by model.n_head={model.n_head}"
        )
    if optimizer.min_lr > optimizer.lr:
        raise ConfigError(f"optimizer.min_lr={optimizer.min_lr} is above optimizer.lr")
    if trainer.sample_chars and not trainer.sample_prompt:
        raise ConfigError(
            "trainer.sample_prompt is empty: the sample needs a character to start from "
            "(or set trainer.sample_chars=0 for no sample)"
        )


def plain(config: Config) -> dict:
    """{"section.name": value} for every setting, amp as its name."""
    return {
        f"{section}.{name}": value.name if isinstance(value, Enum) else value
        for section, settings in dataclasses.asdict(config).items()
        for name, value in settings.items()
    }


def shaping_settings(config: Config) -> dict:
    """The settings that decide what training computes: a snapshot stores them, and a
    run that resumes it with other values would silently train another schedule. (Not
    the micro-batch size, the paths or the sample: a resume may change those.)"""
    kept = "trainer.max_epochs trainer.global_batch_size trainer.max_steps trainer.seed".split()
    return {
        key: value
        for key, value in plain(config).items()
        if key.startswith(("model.", "optimizer.", "data.block", "data.val")) or key in kept
    }


def describe(config: Config) -> list[str]:
    """One line per section, for rank 0 to print."""
    lines = {}
    for key, value in plain(config).items():
        section, name = key.split(".")
        lines.setdefault(section, []).append(f"{name}={value!r}")
    return [f"{section}: {' '.join(items)}" for section, items in lines.items()]
