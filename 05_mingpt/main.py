"""Lesson 05: train a small GPT with DDP, end to end, on text that ships with Python.

Launch it (from any folder, with the path to this file; snapshots and metrics go to
the current folder):

    torchrun --standalone --nproc_per_node=2 main.py
    torchrun --standalone --nproc_per_node=2 main.py trainer.max_epochs=1 model.n_layer=2
    torchrun --standalone --nproc_per_node=2 main.py --data input.txt   # any UTF-8 text
    torchrun --standalone --nproc_per_node=2 --max-restarts=1 main.py  # restarted if a worker dies

Settings come from train_cfg.yaml beside this file (or --config FILE), then from
`section.name=value` overrides (config.py); rank 0 prints them all. On a cluster, the
same script runs under Slurm: see slurm/sbatch_run.sh.

A snapshot in the current folder is resumed if it was trained with the same settings,
else refused in one line (snapshots.py); a finished run says so. When a worker dies
(the notebook kills one from outside, as the out-of-memory killer would), torchrun
restarts the group (it needs --max-restarts) and training resumes from the last
snapshot, mid-epoch if need be (trainer.py): on a CPU it ends with the weights of a run
that never crashed, bit for bit (tests/test_05_training.py); on a GPU only within a
tolerance, since some CUDA kernels, the embedding's backward among them (see
`torch.use_deterministic_algorithms`), add in an order that changes from run to run.

A stop request (a Slurm time limit, a preemption: lesson 03, part 3) stops every rank
at the same step: the snapshot of that step is saved, and the workers exit with 75
("stopped, resume me"). The request is SIGTERM or SIGUSR1 sent to any worker. Sent to
torchrun, SIGTERM is passed on to every worker (it is among torchrun's default
`--signals-to-handle`), but SIGUSR1 kills torchrun itself, unless torchrun was started
with `--signals-to-handle=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1` (common/preemption.py).
"""

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from char_dataset import DataError, build_datasets
from config import ConfigError, describe, load_config
from model import GPT, GPTShape
from schedule import count_steps, micro_batching
from torch.distributed.elastic.multiprocessing.errors import record
from trainer import Trainer

from common.cli import LessonArgumentParser
from common.distributed import (
    current_rank,
    device_for,
    end_process,
    log0,
    store_of_this_attempt,
    torchrun_env,
)
from common.preemption import RESUMABLE_EXIT_CODE, StopRequest, stop_the_agent
from common.snapshot import SnapshotError

LAUNCH = "torchrun --standalone --nproc_per_node=2 main.py"
HERE = Path(__file__).resolve().parent


def ddp_setup() -> torch.device:
    """Join the process group, as the rank this process was given; return its device."""
    # DDP: torchrun's LOCAL_RANK, RANK, WORLD_SIZE (without them: one line, and exit)
    local_rank, global_rank, world_size = torchrun_env(LAUNCH)  # one machine: gloo on loopback
    device = device_for(local_rank)  # DDP: process i of a machine owns GPU i, or the CPU
    dist.init_process_group(  # DDP: nccl between GPUs, gloo between CPUs
        backend=dist.get_default_backend_for_device(device),
        store=store_of_this_attempt(LAUNCH),  # torchrun's, under this attempt's prefix
        rank=global_rank,
        world_size=world_size,
        # On a GPU, device_id binds this process to its GPU: nccl connects now (a wrong
        # setup fails here, not at the first all-reduce) and barrier() knows the GPU.
        device_id=device if device.type == "cuda" else None,
    )
    return device


def parse_arguments():
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument("overrides", nargs="*", help="settings as section.name=value")
    parser.add_argument("--config", default=str(HERE / "train_cfg.yaml"), help="a YAML file")
    parser.add_argument("--data", help="a UTF-8 text file (default: pydoc_data.topics)")
    return parser, parser.parse_args()


def fail(parser: LessonArgumentParser, message: str):
    """One line from rank 0 (every rank hits the same error) and exit status 2. Once
    the process group exists every rank calls it, and torchrun is asked not to restart:
    the same input would fail again (lesson 03, part 3)."""
    if current_rank() == 0:
        sys.stderr.write(parser.error_line(message))
    if dist.is_initialized():
        stop_the_agent()
        dist.barrier()  # the agent has been asked before any worker exits
        dist.destroy_process_group()
        end_process(2)
    raise SystemExit(2)


def build_model(config, vocab_size: int, device: torch.device):
    """The GPT of the config and its AdamW optimizer."""
    # The same seed on every rank builds the same initial weights (DDP would broadcast
    # rank 0's anyway); then each rank gets a random stream of its own for dropout.
    torch.manual_seed(config.trainer.seed)
    model = GPT(GPTShape(vocab_size=vocab_size, block_size=config.data.block_size,
                         **vars(config.model)))  # fmt: skip
    torch.manual_seed(config.trainer.seed + dist.get_rank())
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


# Whatever a worker raises, @record writes it to a file that torchrun reads, so
# torchrun's failure report shows the worker's own error and traceback.
@record
def main() -> int:
    stop = StopRequest()  # first: a stop asked for while the job starts is noted, not fatal
    parser, args = parse_arguments()
    try:  # every check that needs no process group, before one forms
        config = load_config(args.config, args.overrides)
        if args.data is not None:
            config.data.path = args.data
        data = build_datasets(config.data.path, config.data.block_size,
                              config.data.val_fraction, config.trainer.seed)  # fmt: skip
        data.vocabulary.encode(config.trainer.sample_prompt)  # fails now, not after training
        count_steps(config, len(data.train_set))  # a schedule that cannot run, too
        micro_batching(config, int(os.environ.get("WORLD_SIZE", "1")))
    except (ConfigError, DataError) as error:
        fail(parser, str(error))

    device = ddp_setup()
    for line in describe(config):
        log0(f"config {line}")
    log0(
        f"data: {data.source}, {data.vocabulary.vocab_size} distinct characters; "
        f"{len(data.train_set)} training windows per epoch and {len(data.val_set)} validation "
        f"windows of {config.data.block_size}; world of {dist.get_world_size()} on "
        f"{device.type} ({dist.get_backend()})"
    )
    model, optimizer = build_model(config, data.vocabulary.vocab_size, device)
    tied = " (output layer tied to the token embedding)" if model.shape.tie_weights else ""
    log0(f"model: {sum(p.numel() for p in model.parameters()):,} parameters{tied}")
    try:
        trainer = Trainer(config, model, optimizer, data, device, stop)
    except SnapshotError as error:
        fail(parser, str(error))
    if trainer.finished:
        log0(
            f"{trainer.snapshot_path} holds a finished run ({trainer.step} of "
            f"{trainer.total_steps} steps): delete it, or set another "
            "trainer.snapshot_path, to train again"
        )
        dist.destroy_process_group()
        return 0
    if not trainer.train():
        dist.destroy_process_group()
        return RESUMABLE_EXIT_CODE  # 75: stopped at a saved step, resume me

    if dist.get_rank() == 0 and config.trainer.sample_chars:
        text = sample(trainer.raw_model, data.vocabulary, config.trainer, device)
        log0("sample:")
        for line in text.splitlines():
            log0(f"| {line}")
    dist.destroy_process_group()  # DDP:
    if os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        log0(f"finished after {os.environ['TORCHELASTIC_RESTART_COUNT']} restart(s)")
    return 0


if __name__ == "__main__":
    end_process(main())  # not Python's teardown: see common.distributed.end_process
