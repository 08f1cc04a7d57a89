"""Lesson 05: train a small GPT with DDP, end to end, on text that ships with Python.

Launch it (from any folder, with the path to this file; snapshots and metrics go to
the current folder):

    torchrun --standalone --nproc_per_node=2 main.py
    torchrun --standalone --nproc_per_node=2 main.py trainer.max_epochs=1 model.n_layer=2
    torchrun --standalone --nproc_per_node=2 main.py --data input.txt   # any UTF-8 text
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --standalone --nproc_per_node=2 \
        --max-restarts=1 main.py --crash_epoch 1 --crash_step 5
    torchrun --standalone --nproc_per_node=2 main.py trainer.max_epochs=5 \
        --resume_with_new_config   # train a finished run longer (a new schedule)

Settings come from train_cfg.yaml beside this file (or --config FILE), then from
`section.name=value` overrides; rank 0 prints them all. On a cluster, the same
script runs under Slurm: see slurm/sbatch_run.sh.

A snapshot in the current folder is resumed, if it was trained with the same
settings (model, data shape, optimizer, global batch, schedule, seed) and precision;
others are refused in one line, unless --resume_with_new_config. A finished run says
so. A resume in the middle of an epoch reaches its step by drawing the epoch's batches
from the start and dropping those already trained on (the sampler has no way to start
mid-epoch): no forward or backward pass for them, but every one is still read and
collated, which costs next to nothing for this text and up to an epoch's data loading
for data that is decoded or read from disk.

A stop request (a Slurm time limit, a preemption: lesson 03, part 3) stops every rank
at the same step: the snapshot of that step is saved, and the workers exit with 75
("stopped, resume me"). The request is SIGTERM or SIGUSR1 sent to any worker. Sent to
torchrun, SIGTERM is passed on to every worker (it is among torchrun's default
`--signals-to-handle`), but SIGUSR1 kills torchrun itself, unless torchrun was started
with `--signals-to-handle=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1` (common/preemption.py).
The next launch in the same folder resumes the run: on a CPU it ends with the weights
of a run never stopped, bit for bit (tests/test_05_training.py); on a GPU only within
a tolerance, since some CUDA kernels, the embedding's backward among them (see
`torch.use_deterministic_algorithms`), add in an order that changes from run to run.

`--crash_epoch E --crash_step S [--crash_rank R]` (as in lesson 03, counted from 0)
kills rank R hard at step S of epoch E, in the job's first attempt only (on any node:
lesson 04's rule, common/crash_injection.py): torchrun restarts
the group (it needs --max-restarts) and training resumes from the last snapshot,
ending with the same weights as a run that never crashed. The variable gives every
attempt a fresh store for the workers: by default torchrun keeps one across restarts,
and a restarted worker may read a dead worker's address, then meet its peer, be
refused, or wait with it until the timeout (lesson 03 shows all three).
"""

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from char_dataset import DataError, build_datasets
from config import ConfigError, describe, load_config
from model import GPT, GPTShape
from resume import ResumeMismatch
from schedule import count_steps, micro_batching
from trainer import Trainer

from common.cli import LessonArgumentParser
from common.crash_injection import add_crash_arguments, crash_plan, restarts_of_the_job
from common.distributed import (
    backend_for,
    current_rank,
    device_for,
    end_process,
    log0,
    torchrun_env,
)
from common.preemption import RESUMABLE_EXIT_CODE, StopRequest, stop_the_agent
from common.snapshot import SnapshotError

LAUNCH = "torchrun --standalone --nproc_per_node=2 main.py"
HERE = Path(__file__).resolve().parent


def parse_arguments():
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument("overrides", nargs="*", help="settings as section.name=value")
    parser.add_argument("--config", default=str(HERE / "train_cfg.yaml"), help="a YAML file")
    parser.add_argument("--data", help="a UTF-8 text file (default: pydoc_data.topics)")
    parser.add_argument(
        "--resume_with_new_config",
        action="store_true",
        help="resume a snapshot trained with other settings (e.g. more epochs)",
    )
    add_crash_arguments(parser)  # --crash_rank, --crash_epoch, --crash_step, as in lesson 03
    return parser, parser.parse_args()


def fail(parser: LessonArgumentParser, message: str, every_rank: bool = False):
    """One line and exit status 2: from rank 0 only when every rank hits the same error
    with the same input, from `every_rank` when each has its own. Once the process
    group exists every rank calls it, and torchrun is asked not to restart: the same
    input would fail again (lesson 03, part 3)."""
    if every_rank or current_rank() == 0:
        sys.stderr.write(parser.error_line(message))
    if dist.is_initialized():
        stop_the_agent()
        dist.barrier()  # the agent has been asked before any worker exits
        dist.destroy_process_group()
        end_process(2)
    raise SystemExit(2)


def build_model(config, vocab_size: int, global_rank: int, device: torch.device):
    """The GPT of the config and its AdamW optimizer."""
    # The same seed on every rank builds the same initial weights (DDP would broadcast
    # rank 0's anyway); then each rank gets a random stream of its own for dropout.
    torch.manual_seed(config.trainer.seed)
    shape = GPTShape(
        vocab_size=vocab_size,
        block_size=config.data.block_size,
        n_layer=config.model.n_layer,
        n_head=config.model.n_head,
        n_embd=config.model.n_embd,
        dropout=config.model.dropout,
        tie_weights=config.model.tie_weights,
    )
    model = GPT(shape)
    torch.manual_seed(config.trainer.seed + global_rank)
    opt = config.optimizer
    # On a GPU, one fused kernel updates every parameter (fewer launches than a loop
    # over tensors). On a CPU PyTorch's default, a loop over tensors, is kept.
    optimizer = torch.optim.AdamW(
        model.optimizer_groups(opt.weight_decay), lr=opt.lr, betas=(opt.beta1, opt.beta2),
        fused=device.type == "cuda" or None,
    )  # fmt: skip
    return model, optimizer


def sample(model, vocabulary, settings, device: torch.device) -> str:
    """`sample_chars` characters after the prompt; reproducible, from a generator of
    its own (the training's random streams are left as they were)."""
    generator = torch.Generator(device=device).manual_seed(settings.seed)
    prompt = vocabulary.encode(settings.sample_prompt)[None].to(device)
    out = model.generate(
        prompt, settings.sample_chars, settings.temperature, settings.top_k, generator
    )
    return vocabulary.decode(out[0])


def main() -> int:
    stop = StopRequest()  # first: a stop asked for while the job starts is noted, not fatal
    parser, args = parse_arguments()
    try:
        config = load_config(args.config, args.overrides)
        if args.data is not None:
            config.data.path = args.data
        vocabulary, train_set, val_set, source = build_datasets(
            config.data.path,
            config.data.block_size,
            config.data.val_fraction,
            config.trainer.seed,
        )
        vocabulary.encode(config.trainer.sample_prompt)  # fails now, not after the training
        count_steps(config, len(train_set))  # a schedule that cannot run, too
    except (ConfigError, DataError) as error:
        fail(parser, str(error))
    local_rank, global_rank, world_size = torchrun_env(launch_hint=LAUNCH)
    try:
        micro_batching(config, world_size)  # before any process group forms
    except ConfigError as error:
        fail(parser, str(error))
    crash_at = crash_plan(args)

    device = device_for(local_rank)
    dist.init_process_group(
        backend=backend_for(device.type),
        device_id=device if device.type == "cuda" else None,  # nccl: this GPU, connect now
    )
    if crash_at is not None and restarts_of_the_job(device) > 0:
        crash_at = None  # the failure is injected once per job (lesson 04), not per attempt
    for line in describe(config):
        log0(f"config {line}")
    log0(
        f"data: {source}, {vocabulary.vocab_size} distinct characters; {len(train_set)} "
        f"training windows per epoch and {len(val_set)} validation windows of "
        f"{config.data.block_size}; world of {world_size} on {device.type} ({dist.get_backend()})"
    )

    model, optimizer = build_model(config, vocabulary.vocab_size, global_rank, device)
    tied = " (output layer tied to the token embedding)" if model.shape.tie_weights else ""
    log0(f"model: {sum(p.numel() for p in model.parameters()):,} parameters{tied}")
    try:
        trainer = Trainer(
            config, model, optimizer, vocabulary, train_set, val_set, device,
            local_rank, global_rank, world_size, crash_at, args.resume_with_new_config, stop,
        )  # fmt: skip
    except ResumeMismatch as error:
        fail(parser, str(error), every_rank=True)
    except (ConfigError, SnapshotError) as error:
        fail(parser, str(error))
    if trainer.finished:
        log0(
            f"{trainer.files.latest} holds a finished run ({trainer.step} of "
            f"{trainer.total_steps} steps): delete it (or set trainer.snapshot_path) to "
            "train again, or raise trainer.max_epochs (or trainer.max_steps) and add "
            "--resume_with_new_config"
        )
        dist.destroy_process_group()
        return 0
    if crash_at and not (
        0 <= crash_at[0] < world_size
        and 0 <= crash_at[1] < config.trainer.max_epochs
        and 0 <= crash_at[2] < trainer.steps_per_epoch
        and crash_at[1] * trainer.steps_per_epoch + crash_at[2] < trainer.total_steps
    ):
        # A crash that never happens would let a demonstration pass for the wrong reason.
        fail(
            parser,
            f"--crash_rank {crash_at[0]} --crash_epoch {crash_at[1]} --crash_step {crash_at[2]} "
            f"never happens: ranks are 0 to {world_size - 1}, epochs 0 to "
            f"{config.trainer.max_epochs - 1}, steps 0 to {trainer.steps_per_epoch - 1}, "
            f"{trainer.total_steps} steps in all",
        )
    if not trainer.train():
        dist.destroy_process_group()
        return RESUMABLE_EXIT_CODE  # 75: stopped at a saved step, resume me

    if global_rank == 0 and config.trainer.sample_chars:
        text = sample(trainer.raw_model, vocabulary, config.trainer, device)
        log0("sample:")
        for line in text.splitlines():
            log0(f"| {line}")
    dist.destroy_process_group()
    if os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        log0(f"finished after {os.environ['TORCHELASTIC_RESTART_COUNT']} restart(s)")
    return 0


if __name__ == "__main__":
    end_process(main())  # not Python's teardown: see common.distributed.end_process
