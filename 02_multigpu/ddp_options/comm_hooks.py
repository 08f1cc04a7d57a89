"""Lesson 02, DDP's options: communication hooks, from DDP's own to gradient compression.

A communication hook replaces what DDP does with a gradient bucket once it is ready:
by default, divide it by the world size, then all-reduce it (a sum of gradients each
divided by N is their average; dividing first keeps 16-bit sums within range). Without
a hook, DDP's reducer does the same, scaling each gradient as it copies it into its
bucket; with `allreduce_hook`, `_allreduce_fut` divides the bucket. The contract: a function
`hook(state, bucket)` that returns a `torch.futures.Future` whose value is the bucket
of averaged gradients, a tensor of the same shape as `bucket.buffer()`. The hooks run:

- `plain`:    `default_hooks.allreduce_hook`: what DDP does without a hook;
- `by_hand`:  `average_hook` below: the average written out, to show the contract; it
  sums, then divides. With 2 ranks that equals DDP's divide-then-sum bit for bit, as
  dividing by 2 is exact in binary floating point; with 3 it need not (the run counts
  the elements where the two orders differ, on random numbers);
- `fp16`, `bf16`: the bucket sent as 16-bit floats, half the bytes, then turned back;
- `powersgd1`, `powersgd4`: PowerSGD: each gradient matrix (n x m) sent as two thin
  factors of rank 1 or 4, (n + m) x rank numbers, with the error it leaves out kept
  and added back at the next step ("error feedback").

Every built-in hook sends its tensors with `torch.distributed.all_reduce`, and so
does `average_hook`; `common.traffic.counting_all_reduce` wraps that function to count
the bytes each hook hands to it. Two parts:

1. traffic: a model of `--size-mb` of gradients, in one bucket, and a tiny batch,
   where communication dominates: bytes sent and time per step, for each hook (one
   bucket, because PowerSGD can hang on gloo with several: see `traffic`), and the
   memory PowerSGD's state keeps per rank;
2. training: a small model trained for `--steps` steps with each hook: the loss
   every few steps (every step goes to `--curves FILE`, which the notebook plots),
   and the final weights against `plain`.

Launch it (from any folder, with the path to this file):

    torchrun --standalone --nproc_per_node=2 comm_hooks.py
    torchrun --standalone --nproc_per_node=4 comm_hooks.py --size-mb 64 --curves curves.json
"""

import inspect
import json
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

from common.cli import LessonArgumentParser, positive_int
from common.data import IN_FEATURES, SyntheticRegression
from common.distributed import device_for, end_process, log0, torchrun_env
from common.replicas import flat_parameters
from common.traffic import counting_all_reduce

LAUNCH = (
    "torchrun --standalone --nproc_per_node=2 comm_hooks.py [--size-mb 32] [--steps 80] "
    "[--curves curves.json]"
)
HOOKS = ("plain", "by_hand", "fp16", "bf16", "powersgd1", "powersgd4")
WIDTH = 2048  # the traffic model's layers: 2048 x 2048 float32, 16 MB each
TIMED_STEPS, WARMUP_STEPS = 8, 3
MB = 2**20


def average_hook(process_group: dist.ProcessGroup | None, bucket: dist.GradBucket):
    """The average, written out: sum the bucket over the ranks, then divide (DDP's own
    hook divides first)."""
    group = process_group if process_group is not None else dist.group.WORLD
    world_size = dist.get_world_size(group)
    # async_op=True: return at once, so that DDP can go on with the backward pass
    # while the bucket travels; the Future completes when the all-reduce has.
    summed = dist.all_reduce(bucket.buffer(), group=group, async_op=True).get_future()
    # What the Future gives DDP: a callback run once the sum has arrived.
    return summed.then(lambda done: done.value()[0].div_(world_size))


def division_order_differs(world_size: int, numel: int = 100_000) -> int:
    """Of `numel` sums of `world_size` random float32 numbers, how many change when each
    number is divided by `world_size` before the sum instead of the sum after it."""
    terms = torch.randn(world_size, numel, generator=torch.Generator().manual_seed(0))
    divided_first = sum(term / world_size for term in terms)
    divided_after = sum(term for term in terms) / world_size
    return int((divided_first != divided_after).sum())


def attach(model: DDP, hook: str) -> powerSGD_hook.PowerSGDState | None:
    """Register the communication hook called `hook` on `model`; return PowerSGD's
    state, which a checkpoint should keep (None for the other hooks)."""
    if hook == "plain":
        model.register_comm_hook(None, default_hooks.allreduce_hook)
    elif hook == "by_hand":
        model.register_comm_hook(None, average_hook)
    elif hook in ("fp16", "bf16"):
        compress = {
            "fp16": default_hooks.fp16_compress_hook,
            "bf16": default_hooks.bf16_compress_hook,
        }
        model.register_comm_hook(None, compress[hook])
    else:
        state = powerSGD_hook.PowerSGDState(
            process_group=None,
            matrix_approximation_rank=int(hook.removeprefix("powersgd")),
            # Plain all-reduce for the first 2 steps (the least PowerSGD allows with
            # error feedback); PowerSGD's default is 1,000, past a noisy start.
            start_powerSGD_iter=2,
        )
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return state
    return None


def state_megabytes(state: powerSGD_hook.PowerSGDState) -> tuple[float, float]:
    """MB that PowerSGD's state holds on this rank: the error it feeds back (a float32
    copy of every compressed gradient) and its P and Q factors, kept for a warm start."""
    error = sum(t.numel() * t.element_size() for t in state.error_dict.values())
    factors = [*state.p_memory_dict.values(), *state.q_memory_dict.values()]
    return error / MB, sum(t.numel() * t.element_size() for t in factors) / MB


def traffic(hook: str, size_mb: int, device: torch.device) -> tuple[float, float, tuple | None]:
    """MB sent and seconds per step (medians over TIMED_STEPS) with `hook`, and the MB
    of PowerSGD's state (None for the other hooks)."""
    torch.manual_seed(0)
    layers = max(1, size_mb * 2**20 // (WIDTH * WIDTH * 4))
    model = DDP(
        nn.Sequential(*(nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(layers))).to(device),
        device_ids=[device.index] if device.type == "cuda" else None,
        # One bucket for all the gradients. PowerSGD's callbacks (chained with `then`)
        # launch the next all-reduce, of P then of Q, and wait for it. gloo runs a
        # future's callbacks on the group's worker threads, the ones that also run its
        # collectives: with as many buckets in flight as workers, every worker can end
        # up waiting, in a callback, for an all-reduce that no free worker is left to
        # run. A race, seen even in a world of one process; one bucket cannot hang.
        bucket_cap_mb=size_mb + 1,
    )
    state = attach(model, hook)
    inputs = torch.randn(8, WIDTH, device=device)
    sent, seconds = [], []
    for step in range(WARMUP_STEPS + TIMED_STEPS):
        counter = {"bytes": 0}
        dist.barrier()
        started = time.perf_counter()
        with counting_all_reduce(counter):
            model.zero_grad()
            model(inputs).square().mean().backward()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if step >= WARMUP_STEPS:  # past PowerSGD's plain start, and the bucket rebuild
            seconds.append(time.perf_counter() - started)
            sent.append(counter["bytes"] / 2**20)
    memory = state_megabytes(state) if state is not None else None
    return statistics.median(sent), statistics.median(seconds), memory


def training(hook: str, steps: int, device: torch.device) -> tuple[list[float], torch.Tensor]:
    """Train a small network with `hook`; return the loss averaged over the ranks at
    each step, and the final weights."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    network = nn.Sequential(
        nn.Linear(IN_FEATURES, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)
    )
    model = DDP(network.to(device), device_ids=[device.index] if device.type == "cuda" else None)
    attach(model, hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
    data = SyntheticRegression(size=steps * world_size * 16)
    losses = []
    for step in range(steps):
        start = (step * world_size + rank) * 16
        inputs, targets = data.inputs[start : start + 16], data.targets[start : start + 16]
        optimizer.zero_grad()
        loss = F.mse_loss(model(inputs.to(device)), targets.to(device))
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    curve = torch.stack(losses).double()
    dist.all_reduce(curve)  # one collective for the whole curve, not one per step
    return (curve / world_size).tolist(), flat_parameters(model.module)


def main() -> None:
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument("--size-mb", type=positive_int, default=32, help="traffic model size")
    parser.add_argument("--steps", type=positive_int, default=80, help="training steps")
    parser.add_argument("--curves", type=Path, help="write every step's loss here (JSON)")
    args = parser.parse_args()
    if args.steps < 3:
        parser.error(f"--steps {args.steps} is too few: PowerSGD starts at step 2")
    local_rank, _, world_size = torchrun_env(launch_hint=LAUNCH)
    device = device_for(local_rank)
    dist.init_process_group(
        backend=dist.get_default_backend_for_device(device),
        device_id=device if device.type == "cuda" else None,  # nccl: this GPU, connect now
    )

    log0(f"traffic: {args.size_mb} MB of float32 gradients per step, {world_size} ranks")
    if dist.get_backend() == "gloo":
        threads = dist.group.WORLD._get_backend(torch.device("cpu")).options._threads
        log0(f"gloo: {threads} worker threads run this process group's collectives")
    default_start = (
        inspect.signature(powerSGD_hook.PowerSGDState).parameters["start_powerSGD_iter"].default
    )
    log0(f"PowerSGD compresses from step 2 here; start_powerSGD_iter's default: {default_start}")
    traffic("plain", args.size_mb, device)  # not shown: the first model's one-time costs
    for hook in HOOKS:
        megabytes, seconds, memory = traffic(hook, args.size_mb, device)
        log0(
            f"traffic | {hook:<9} | MB to all_reduce per step {megabytes:7.3f} "
            f"| ms per step {seconds * 1e3:7.1f}"
        )
        if memory is not None:
            log0(
                f"memory  | {hook:<9} | PowerSGD's state per rank: error feedback "
                f"{memory[0]:.3f} MB, P and Q {memory[1]:.3f} MB"
            )
    for n in (2, 3):
        log0(
            f"dividing by {n} before or after summing {n} numbers: different results in "
            f"{division_order_differs(n)} of 100000 random float32 sums"
        )

    log0(f"training: {args.steps} steps, {world_size} ranks, loss averaged over the ranks")
    final, curves = {}, {}
    every = max(1, args.steps // 8)
    for hook in HOOKS:
        curves[hook], final[hook] = training(hook, args.steps, device)
        shown = " ".join(f"{loss:6.3f}" for loss in curves[hook][::every])
        log0(
            f"training | {hook:<9} | loss every {every} steps {shown} | last {curves[hook][-1]:.4f}"
        )
    if args.curves and dist.get_rank() == 0:
        args.curves.write_text(json.dumps(curves))
    for hook in HOOKS[1:]:
        difference = (final[hook] - final["plain"]).abs().max().item()
        log0(f"training | {hook:<9} | max |w - w plain| {difference:.2e}")

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    end_process()  # not Python's teardown: see common.distributed.end_process
