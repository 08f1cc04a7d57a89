"""Lesson 05: the run's settings as dataclasses, read from YAML, overridden on the
command line, and checked before anything starts.

Used by `main.py` (see its docstring for the commands that launch the lesson).

    torchrun --standalone --nproc_per_node=2 main.py trainer.max_epochs=3 model.n_layer=2

A typo (`trainer.max_epoch=3`) or a bad value (`model.n_head=0`, `optimizer.lr=fast`)
stops the run with one line naming the key and what it accepts, before any process
group is formed: a silently ignored override is a run that did not test what you
meant. (The official series uses Hydra for this; plain dataclasses need no extra
package and show every step.)
"""

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml


class ConfigError(Exception):
    """A setting is unknown or has a bad value; the message is one line."""


@dataclass
class ModelConfig:
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0


@dataclass
class DataConfig:
    path: str | None = None  # None: the pydoc_data.topics text that ships with Python
    block_size: int = 64  # characters of context, and the length of each chunk
    val_fraction: float = 0.1
    split_seed: int = 0


@dataclass
class OptimizerConfig:
    lr: float = 3e-3
    min_lr: float = 3e-4  # the cosine schedule ends here
    warmup_steps: int = 50
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0  # max global gradient norm; 0 turns clipping off


@dataclass
class TrainerConfig:
    max_epochs: int = 3
    batch_size: int = 32  # per process: the global batch is batch_size x world_size
    max_steps: int = 0  # stop after this many optimizer steps; 0: run every epoch
    save_every: int = 1  # snapshot every this many epochs
    snapshot_path: str = "snapshot.pt"
    metrics_path: str = "metrics.jsonl"
    eval_every: int = 100  # steps between validation passes (and one after every epoch)
    log_every: int = 20  # steps between progress lines
    mixed_precision: bool = True  # bf16 autocast on CPU; fp16 + GradScaler on CUDA
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


# What each setting must satisfy, beyond its type.
POSITIVE = {
    "model.n_layer", "model.n_head", "model.n_embd", "data.block_size", "optimizer.lr",
    "trainer.max_epochs", "trainer.batch_size", "trainer.save_every", "trainer.eval_every",
    "trainer.log_every", "optimizer.beta1", "optimizer.beta2", "trainer.temperature",
    "trainer.top_k",
}  # fmt: skip
NOT_NEGATIVE = {
    "optimizer.min_lr", "optimizer.warmup_steps", "optimizer.weight_decay",
    "optimizer.grad_clip", "trainer.max_steps", "trainer.sample_chars",
}  # fmt: skip
BELOW_ONE = {"model.dropout", "data.val_fraction", "optimizer.beta1", "optimizer.beta2"}


def _convert(key: str, value, annotation):
    """`value` as the type the dataclass field declares, or ConfigError."""
    allowed = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else ()
    if value is None and type(None) in allowed:
        return None
    kind = next((a for a in allowed if a is not type(None)), annotation)
    if kind is bool and isinstance(value, bool):
        return value
    if kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind is float and not isinstance(value, bool):
        try:  # YAML reads 1e-4 (no dot) as a string
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if math.isfinite(number):
            return number
    if kind is str and value is not None:
        return str(value)
    expected = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    raise ConfigError(f"{key}={value!r} is not {expected[kind]}")


def _check(config: Config) -> None:
    for section in dataclasses.fields(config):
        for item in dataclasses.fields(getattr(config, section.name)):
            key = f"{section.name}.{item.name}"
            value = getattr(getattr(config, section.name), item.name)
            if key in POSITIVE and not value > 0:
                raise ConfigError(f"{key}={value} must be > 0")
            if key in NOT_NEGATIVE and value < 0:
                raise ConfigError(f"{key}={value} must be >= 0")
            if key in BELOW_ONE and not 0 <= value < 1:
                raise ConfigError(f"{key}={value} must be in [0, 1)")
    if config.model.n_embd % config.model.n_head:
        raise ConfigError(
            f"model.n_embd={config.model.n_embd} must be divisible by "
            f"model.n_head={config.model.n_head}"
        )
    if config.optimizer.min_lr > config.optimizer.lr:
        raise ConfigError(
            f"optimizer.min_lr={config.optimizer.min_lr} is above "
            f"optimizer.lr={config.optimizer.lr}"
        )


def _set(config: Config, key: str, value, text: str | None = None) -> None:
    """Set `key` to `value`; `text` is the value as typed on the command line, which a
    string setting takes as it is (so `trainer.sample_prompt=1` is the string "1")."""
    section_name, _, name = key.partition(".")
    sections = {f.name: f for f in dataclasses.fields(config)}
    if section_name not in sections or not name:
        raise ConfigError(
            f"unknown setting {key!r}: settings are section.name with a section in "
            f"{', '.join(sections)}"
        )
    section = getattr(config, section_name)
    hints = typing.get_type_hints(type(section))
    if name not in hints:
        raise ConfigError(
            f"unknown setting {key!r}; the settings of {section_name} are: {', '.join(hints)}"
        )
    annotation = hints[name]
    if text is not None and str in typing.get_args(annotation) + (annotation,):
        value = None if value is None else text
    setattr(section, name, _convert(key, value, annotation))


def load_config(path: str | Path, overrides: list[str]) -> Config:
    """The defaults, then the YAML file at `path`, then `section.name=value` overrides
    (values are read as YAML: `3` is an int, `3e-4` a float, `false` a bool)."""
    path = Path(path)
    try:
        tree = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as error:
        raise ConfigError(f"cannot read config {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise ConfigError(
            f"config {path} is not valid YAML: {str(error).splitlines()[0]}"
        ) from None
    if not isinstance(tree, dict):
        raise ConfigError(f"config {path} must map sections (model, data, ...) to settings")
    config = Config()
    for section_name, settings in tree.items():
        if not isinstance(settings, dict):
            raise ConfigError(f"config {path}: {section_name!r} must be a section of settings")
        for name, value in settings.items():
            _set(config, f"{section_name}.{name}", value)
    for override in overrides:
        key, equals, text = override.partition("=")
        if not equals or not key:
            raise ConfigError(f"override {override!r} must look like section.name=value")
        try:
            value = yaml.safe_load(text) if text else ""
        except yaml.YAMLError:
            value = text
        _set(config, key, value, text)
    _check(config)
    return config


def describe(config: Config) -> list[str]:
    """One line per section, for rank 0 to print."""
    return [
        f"{section.name}: "
        + " ".join(
            f"{k}={v!r}" for k, v in dataclasses.asdict(getattr(config, section.name)).items()
        )
        for section in dataclasses.fields(config)
    ]
