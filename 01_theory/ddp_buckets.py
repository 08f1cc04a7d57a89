"""Lesson 01: DDP's gradient buckets, and how communication overlaps the backward pass.

DDP does not wait for the whole backward pass to finish before it all-reduces. It
groups the parameters into *buckets* of about `bucket_cap_mb` megabytes, in reverse
order (the last layer's gradients are computed first), and the moment every gradient
of a bucket is ready it launches that bucket's all-reduce, while autograd goes on
computing the gradients of earlier layers.

Three facts it shows, read from PyTorch at run time:
- plain `DDP(model)` caps buckets at 25 MiB but the *first* bucket (the last layers,
  whose gradients come first) at 1 MiB; an explicit `bucket_cap_mb` caps every bucket,
  the first included. A cap is where a bucket closes, not a limit it stays under: DDP
  adds whole parameters to a bucket and closes it as soon as it reaches or passes its
  cap, so the default's first bucket here is the last layer, a little over 1 MiB;
- the first iteration puts every parameter in one bucket; DDP rebuilds its buckets
  after it, in the order the gradients really arrived;
- buckets are all-reduced strictly in index order, the same on every rank, since every
  rank must issue the same collectives in the same order.

This script watches it happen. A gradient hook on every parameter records when its
gradient is ready; a DDP *communication hook* (`register_comm_hook`) records when each
bucket's all-reduce is launched and when it completes, and otherwise does what DDP does
by default (divide by the world size and all-reduce). "Completes" is gloo's meaning:
its futures complete with the collective. nccl's complete once the work is queued on
the GPU, so on a GPU this timeline would show queueing, not communication. It does so
for plain `DDP(model)` ("default") and several values of `bucket_cap_mb`, and prints how
many buckets each gives; `--out FILE` writes the events, for the timeline drawn in the
notebook.

Launch it (from any folder, with the path to this file):

    torchrun --standalone --nproc_per_node=2 ddp_buckets.py
    torchrun --standalone --nproc_per_node=2 ddp_buckets.py --caps default 0.25 1 25 --layers 12
"""

import argparse
import json
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.nn.parallel import distributed as ddp_source

from common.cli import LessonArgumentParser
from common.distributed import device_for, end_process, log0, torchrun_env

LAUNCH = "torchrun --standalone --nproc_per_node=2 ddp_buckets.py"
# DDP's default bucket cap: a named constant since PyTorch 2.12, the same 25 written
# inline in DDP.__init__ before (2.11).
DEFAULT_BUCKET_CAP_MB = getattr(ddp_source, "_DEFAULT_BUCKET_CAP_MB", 25)


def deep_model(layers: int, width: int) -> nn.Sequential:
    torch.manual_seed(0)
    blocks = []
    for _ in range(layers):
        blocks += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*blocks)


def record_buckets(ddp_model) -> list[dict]:
    """Hook `ddp_model` so that every backward pass appends its events to the list
    returned: when each gradient was ready, and when each bucket's all-reduce was
    launched and when it completed."""
    names = {parameter: name for name, parameter in ddp_model.module.named_parameters()}
    events: list[dict] = []
    world_size = dist.get_world_size()

    def gradient_ready(parameter):
        events.append({"kind": "grad_ready", "time": time.perf_counter(), "name": names[parameter]})

    for parameter in ddp_model.module.parameters():
        parameter.register_post_accumulate_grad_hook(gradient_ready)

    def recording_all_reduce(state, bucket: dist.GradBucket):
        event = {
            "kind": "bucket_launch",
            "time": time.perf_counter(),
            "index": bucket.index(),
            "numel": bucket.buffer().numel(),
            "parameters": [names[p] for p in bucket.parameters()],
        }
        events.append(event)
        buffer = bucket.buffer().div_(world_size)  # the average, as DDP's default hook
        future = dist.all_reduce(buffer, async_op=True).get_future()

        def finished(done):
            # The moment the all-reduce completed on gloo (its future completes then). On
            # a GPU, nccl's future completes once the work is queued on the GPU's stream,
            # so this would time the queueing: that timeline needs CUDA events instead.
            event["done"] = time.perf_counter()
            return done.value()[0]

        return future.then(finished)

    ddp_model.register_comm_hook(state=None, hook=recording_all_reduce)
    return events


def watch_one_backward(model, cap_mb, device, batch, iterations):
    """Wrap `model` in DDP with `bucket_cap_mb=cap_mb` (None: DDP's default), train a
    few steps, and return the events of the first and of the last backward pass."""
    ddp_model = DDP(model, bucket_cap_mb=cap_mb)
    events = record_buckets(ddp_model)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=1e-3)
    inputs = torch.randn(batch, model[0].in_features, device=device)
    # DDP rebuilds its buckets after the first iteration, in the order the gradients
    # really arrived; the last iteration shows the buckets it keeps.
    first = []
    for iteration in range(iterations):
        events.clear()
        optimizer.zero_grad()
        ddp_model(inputs).square().mean().backward()
        events.append({"kind": "backward_end", "time": time.perf_counter()})
        optimizer.step()
        if iteration == 0:
            first = list(events)
    return first, events


def launches(events: list[dict]) -> list[dict]:
    """The bucket launches of one backward pass, in the order they happened."""
    return sorted((e for e in events if e["kind"] == "bucket_launch"), key=lambda e: e["time"])


def cap_value(text: str) -> float | None:
    """A --caps value: megabytes, or "default" (plain DDP(model))."""
    if text == "default":
        return None
    try:
        cap = float(text)
    except ValueError:
        cap = 0.0
    if cap <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of MB or 'default'")
    return cap


def main():
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument(
        "--caps",
        type=cap_value,
        nargs="+",
        default=[None, 1.0, 2.0, 4.0, 25.0],
        help="bucket_cap_mb values to try; 'default' is plain DDP(model)",
    )
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--out", type=Path, help="write every cap's events here as JSON")
    args = parser.parse_args()
    if min(args.layers, args.width, args.batch, args.iterations) < 1:
        parser.error("--layers, --width, --batch and --iterations must be at least 1")
    local_rank, global_rank, world_size = torchrun_env(launch_hint=LAUNCH)
    device = device_for(local_rank)
    dist.init_process_group(
        backend=dist.get_default_backend_for_device(device),
        device_id=device if device.type == "cuda" else None,  # nccl: this GPU, connect now
    )

    layer_mb = (args.width * args.width + args.width) * 4 / 2**20
    log0(f"model: {args.layers} x Linear({args.width}, {args.width}), {layer_mb:.3f} MB per layer")
    # Read from PyTorch, not written down: they are what this version does.
    first_mb = dist._DEFAULT_FIRST_BUCKET_BYTES / 2**20
    log0(
        f"DDP(model) without bucket_cap_mb: buckets of up to {DEFAULT_BUCKET_CAP_MB} MB, "
        f"the first one up to {first_mb:g} MB (torch {torch.__version__})"
    )
    results = {}
    for cap in args.caps:
        model = deep_model(args.layers, args.width).to(device)
        first, events = watch_one_backward(model, cap, device, args.batch, args.iterations)
        hooks = [e for e in events if e["kind"] == "grad_ready"]
        buckets = launches(events)
        sizes = ", ".join(f"{b['numel'] * 4 / 2**20:.3f}" for b in buckets)
        plural = "bucket" if len(buckets) == 1 else "buckets"
        name = "default" if cap is None else f"{cap:g}"
        log0(f"bucket_cap_mb={name}: {len(buckets)} {plural}, MB each in launch order: {sizes}")
        log0(
            f"   first iteration: {len(launches(first))} bucket(s); launched in index "
            f"order: {[b['index'] for b in buckets]}"
        )
        first_launch, last_gradient = buckets[0]["time"], hooks[-1]["time"]
        if not results:
            log0(f"   gradient hooks fired in this order: {' '.join(h['name'] for h in hooks)}")
        log0(
            f"   the first bucket's all-reduce started "
            f"{1e3 * (last_gradient - first_launch):.2f} ms before the last gradient was ready"
        )
        results[name] = events
    if args.out and global_rank == 0:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results))
        log0(f"wrote {args.out}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    end_process()  # not Python's teardown: see common.distributed.end_process
