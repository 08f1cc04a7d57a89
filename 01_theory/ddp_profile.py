"""Lesson 01: DDP's overlap as practitioners see it, in a torch.profiler trace of every rank.

`ddp_buckets.py` times DDP's buckets with hooks of its own. On their own jobs people
reach for the profiler instead: `torch.profiler` records what every thread of the
process did, and writes it as a Chrome trace (JSON) that Perfetto (ui.perfetto.dev) or
chrome://tracing draws. This script profiles a few steps of lesson 01's deep model on
every rank and writes one trace per rank, for two jobs:

- `overlap`: plain DDP, which all-reduces each bucket as soon as its gradients are
  ready, while the backward pass goes on (`--bucket-cap-mb`, 1 by default: a bucket per
  layer);
- `after_backward`: the same model with overlap turned off: DDP's `no_sync()` during
  the backward pass, then one all-reduce of every gradient once it is over.

It also times the same steps without the profiler, and prints what the profiler costs.
`--hand-timed` adds `ddp_buckets.py`'s hooks to the `overlap` job and writes their
events beside its traces, to compare the two clocks. The notebook reads the traces back
with `trace_reader.py`.

Launch it (from any folder, with the path to this file):

    torchrun --standalone --nproc_per_node=2 ddp_profile.py --out traces
    torchrun --standalone --nproc_per_node=2 ddp_profile.py --out traces --bucket-cap-mb default
"""

import json
import os
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
from ddp_buckets import cap_value, deep_model, record_buckets
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, schedule

from common.cli import LessonArgumentParser, positive_int
from common.distributed import device_for, end_process, log0, torchrun_env

LAUNCH = "torchrun --standalone --nproc_per_node=2 ddp_profile.py --out traces"
JOBS = ("overlap", "after_backward")
# Step 0 is DDP's first iteration: every parameter in one bucket. DDP rebuilds its
# buckets at the start of step 1's forward, in the order gradients arrived (rank 0's
# order, broadcast to every rank). And the profiler's first recorded step pays its own
# start-up. So the schedule skips step 0 (wait=1), records step 1 only to warm up
# (warmup=1: its events are dropped) and keeps the steps after it: the buckets DDP keeps.
WAIT, WARMUP = 1, 1


def all_reduce_after_backward(ddp_model) -> None:
    """The gradients' average in one all-reduce of all of them, once backward is over."""
    grads = [parameter.grad for parameter in ddp_model.parameters()]
    flat = torch.cat([grad.reshape(-1) for grad in grads]).div_(dist.get_world_size())
    dist.all_reduce(flat)
    for grad, piece in zip(grads, flat.split([grad.numel() for grad in grads]), strict=True):
        grad.copy_(piece.view_as(grad))


def train_step(ddp_model, optimizer, inputs, job: str) -> None:
    optimizer.zero_grad()
    if job == "overlap":
        ddp_model(inputs).square().mean().backward()  # buckets all-reduced during backward
    else:
        with ddp_model.no_sync():  # DDP's hooks send nothing in this backward ...
            ddp_model(inputs).square().mean().backward()
        all_reduce_after_backward(ddp_model)  # ... everything goes once it is over
    optimizer.step()


def timed_step(ddp_model, optimizer, inputs, job, device) -> float:
    started = time.perf_counter()
    train_step(ddp_model, optimizer, inputs, job)
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # the GPU's work is part of the step
    return time.perf_counter() - started


def profile_job(job, args, device, folder: Path) -> dict:
    """Profile `args.steps` steps of `job` after the skipped ones; write this rank's trace
    (and, with --hand-timed, the hooks' events of the same steps). Return step times."""
    model = deep_model(args.layers, args.width).to(device)
    ddp_model = DDP(model, bucket_cap_mb=args.bucket_cap_mb)
    hand_timed = record_buckets(ddp_model) if args.hand_timed and job == "overlap" else None
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=1e-3)
    inputs = torch.randn(args.batch, args.width, device=device)
    # On a GPU, CUDA activities too: kernels, nccl's among them, on the streams they ran on.
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    rank = dist.get_rank()
    trace = folder / job / f"rank{rank}.json"
    trace.parent.mkdir(parents=True, exist_ok=True)
    hand_events, profiled = {}, []
    with profile(
        activities=activities,
        schedule=schedule(wait=WAIT, warmup=WARMUP, active=args.steps, repeat=1),
        record_shapes=True,  # the size of each all-reduce
        on_trace_ready=lambda profiler: profiler.export_chrome_trace(str(trace)),
    ) as profiler:
        for step in range(WAIT + WARMUP + args.steps):
            if hand_timed is not None:
                hand_timed.clear()
            seconds = timed_step(ddp_model, optimizer, inputs, job, device)
            if step >= WAIT + WARMUP:  # the trace calls this step ProfilerStep#<step>
                profiled.append(seconds)
                if hand_timed is not None:
                    hand_events[step] = list(hand_timed)
            profiler.step()
    if hand_timed is not None:
        (folder / job / f"hand_timed_rank{rank}.json").write_text(json.dumps(hand_events))
    # The same steps again, the profiler off: what it costs.
    unprofiled = [timed_step(ddp_model, optimizer, inputs, job, device) for _ in range(args.steps)]
    return {"profiled": profiled, "unprofiled": unprofiled}


def main():
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument("--out", type=Path, required=True, help="folder for the traces")
    parser.add_argument(
        "--bucket-cap-mb", type=cap_value, default=1.0, help="MB, or 'default': plain DDP(model)"
    )
    parser.add_argument("--steps", type=positive_int, default=3, help="steps recorded per job")
    parser.add_argument("--hand-timed", action="store_true", help="also ddp_buckets.py's hooks")
    parser.add_argument("--layers", type=positive_int, default=8)
    parser.add_argument("--width", type=positive_int, default=512)
    parser.add_argument("--batch", type=positive_int, default=64)
    args = parser.parse_args()
    local_rank, global_rank, world_size = torchrun_env(launch_hint=LAUNCH)
    device = device_for(local_rank)
    if device.type == "cpu":
        # Writing the trace, the profiler's library (Kineto) asks the CUDA runtime for the
        # GPUs' properties; without an NVIDIA driver that fails (error 35) and Kineto prints
        # "gpuGetDeviceCount failed with code 35", plus a line at each start and stop. The
        # trace is complete regardless. Kineto prints only kinds of message at or above
        # KINETO_LOG_LEVEL (VERBOSE=0 ... ERROR=4, USDT=5): 6 prints none. Set it yourself
        # to see them.
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    dist.init_process_group(
        backend=dist.get_default_backend_for_device(device),
        device_id=device if device.type == "cuda" else None,  # nccl: this GPU, connect now
    )
    for job in JOBS:
        times = profile_job(job, args, device, args.out)
        dist.barrier()  # every rank has written its trace
        with_profiler, without = (1e3 * statistics.median(times[k]) for k in times)
        log0(
            f"{job}: {world_size} traces in {args.out / job}; a step took "
            f"{with_profiler:.1f} ms with the profiler, {without:.1f} ms without "
            f"(rank 0, median of {args.steps} steps)"
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    end_process()  # not Python's teardown: see common.distributed.end_process
