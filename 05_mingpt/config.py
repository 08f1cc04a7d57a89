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
    tie_weights: bool = False  # the output layer shares the token embedding's matrix


@dataclass
class DataConfig:
    path: str | None = None  # None: the pydoc_data.topics text that ships with Python
    block_size: int = 64  # characters of context, and the length of each chunk
    val_fraction: float = 0.1  # the text's last part, held out whole for validation


@dataclass
class OptimizerConfig:
    lr: float = 3e-3
    min_lr: float = 3e-4  # the cosine schedule ends here
    warmup_steps: int = 50
    decay_steps: int = 0  # the cosine decay ends here, then min_lr; 0: at the last epoch's end
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
    keep_snapshots: int = 0  # also keep the newest N snapshots, tagged with their step
    snapshot_path: str = "snapshot.pt"
    metrics_path: str = "metrics.jsonl"
    eval_every: int = 100  # steps between validation passes (and one after every epoch)
    log_every: int = 20  # steps between progress lines
    amp: str = "auto"  # auto | bf16 | fp16 | off: see precision.py
    compile: bool = False  # torch.compile the model before the DDP wrap
    peak_tflops: float = 0.0  # for MFU, per process; 0: measure a matmul at the start
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
    "trainer.top_k", "trainer.global_batch_size", "data.val_fraction",
}  # fmt: skip
NOT_NEGATIVE = {
    "optimizer.min_lr", "optimizer.warmup_steps", "optimizer.weight_decay",
    "optimizer.grad_clip", "trainer.max_steps", "trainer.sample_chars",
    "trainer.save_every_steps", "trainer.peak_tflops", "optimizer.decay_steps",
    "trainer.keep_snapshots",
}  # fmt: skip
BELOW_ONE = {"model.dropout", "data.val_fraction", "optimizer.beta1", "optimizer.beta2"}
CHOICES = {"trainer.amp": ("auto", "bf16", "fp16", "off")}


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
    if kind is str and isinstance(value, bool):  # YAML reads off, no, on, yes as booleans
        raise ConfigError(f"{key}: YAML reads the value as {value}; quote it, as in {key}: 'off'")
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
            if key in CHOICES and value not in CHOICES[key]:
                raise ConfigError(f"{key}={value!r} must be one of {', '.join(CHOICES[key])}")
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
    trainer = config.trainer
    if trainer.sample_chars and not trainer.sample_prompt:
        raise ConfigError(
            "trainer.sample_prompt is empty: the sample needs at least one character to "
            "start from (or set trainer.sample_chars=0 for no sample)"
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


def shaping_settings(config: Config) -> dict:
    """The settings that decide what training computes: a snapshot stores them, and a
    run that resumes it with other values would silently train another schedule.
    (Not the micro-batch size, the precision or the paths: a resume may change those.)"""
    settings = dataclasses.asdict(config)
    trainer = {
        name: settings["trainer"][name]
        for name in ("max_epochs", "global_batch_size", "max_steps", "seed")
    }
    return {
        **{f"model.{name}": value for name, value in settings["model"].items()},
        "data.block_size": config.data.block_size,
        "data.val_fraction": config.data.val_fraction,
        **{f"optimizer.{name}": value for name, value in settings["optimizer"].items()},
        **{f"trainer.{name}": value for name, value in trainer.items()},
    }


def describe(config: Config) -> list[str]:
    """One line per section, for rank 0 to print."""
    return [
        f"{section.name}: "
        + " ".join(
            f"{k}={v!r}" for k, v in dataclasses.asdict(getattr(config, section.name)).items()
        )
        for section in dataclasses.fields(config)
    ]
