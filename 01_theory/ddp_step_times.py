"""Lesson 01, part 2: how long a DDP step takes, and where the time goes.

The measurements that `cost_model.py`'s step model is checked against. For each
`bucket_cap_mb` it trains lesson 01's deep model (the one `ddp_buckets.py` watches) and
times, per step, on every rank:

- the whole DDP step (forward, backward with its gradient all-reduces, optimizer);
- the same step with the all-reduces switched off (`no_sync`): the compute alone, with
  the same number of processes sharing the machine, so that the model is given the
  compute this world really had;
- when each gradient became ready in that backward pass (a hook on every parameter);

and reads back the buckets DDP built (after the first iteration it rebuilds them in
the order gradients arrived). Each figure is the quickest of the timed steps (the slowest
rank's time of each step: a step ends when the last rank's does), the estimator the
notebook uses for its all-reduces too: on a shared machine it is the least disturbed.
Rank 0 prints them; `--out FILE` writes them as JSON.

Launch it (from any folder, with the path to this file):

    torchrun --standalone --nproc_per_node=2 ddp_step_times.py
    torchrun --standalone --nproc_per_node=4 ddp_step_times.py --caps 1 4 25 --steps 12
"""

import json
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from common.cli import LessonArgumentParser, positive_int, positive_number
from common.distributed import device_for, end_process, log0, torchrun_env

LAUNCH = "torchrun --standalone --nproc_per_node=2 ddp_step_times.py"


def deep_model(layers: int, width: int) -> nn.Sequential:
    """`layers` equal Linear layers, seeded alike on every rank: ddp_buckets.py's model
    (the same parameters, so the same buckets) without its ReLUs."""
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])


def slowest(seconds: float, device: torch.device) -> float:
    """The slowest rank's time: a collective step is over when every rank's is."""
    value = torch.tensor([seconds], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return value.item()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def one_step(model, optimizer, batch, device, sync: bool, watch: dict | None = None) -> dict:
    """Time one step's forward, backward and optimizer, each rank on its own clock.
    With `watch`, the gradient hooks write into it when each gradient was ready."""
    optimizer.zero_grad(set_to_none=True)
    dist.barrier()  # every rank starts together
    started = time.perf_counter()
    model.require_backward_grad_sync = sync  # set before the forward: DDP reads it there
    loss = model(batch).square().mean()
    synchronize(device)
    forward_done = time.perf_counter()
    if watch is not None:
        watch.update(backward_started=forward_done, ready={})
    loss.backward()
    synchronize(device)
    backward_done = time.perf_counter()
    optimizer.step()
    synchronize(device)
    done = time.perf_counter()
    return {
        "forward": forward_done - started,
        "backward": backward_done - forward_done,
        "optimizer": done - backward_done,
        "step": done - started,
    }


def measure(cap_mb: float, args, device, world_size) -> dict:
    model = DDP(deep_model(args.layers, args.width).to(device), bucket_cap_mb=cap_mb)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    parameters = list(model.parameters())
    watch: dict = {}

    def hook(index):
        def gradient_ready(parameter):  # fires once this parameter's gradient is accumulated
            if "ready" in watch:
                watch["ready"][index] = time.perf_counter() - watch["backward_started"]

        return gradient_ready

    for index, parameter in enumerate(parameters):
        parameter.register_post_accumulate_grad_hook(hook(index))
    batch = torch.randn(args.batch, args.width, generator=torch.Generator().manual_seed(1))
    batch = batch.to(device)
    # Two synchronized warm-up steps: the first uses one bucket, then DDP rebuilds them.
    for _ in range(2):
        one_step(model, optimizer, batch, device, sync=True)
    synced, alone, arrivals = [], [], []
    for _ in range(args.steps):  # alternate, so a busy moment slows both kinds alike
        times = one_step(model, optimizer, batch, device, sync=True)
        synced.append({k: slowest(v, device) for k, v in times.items()})
        times = one_step(model, optimizer, batch, device, sync=False, watch=watch)
        alone.append({k: slowest(v, device) for k, v in times.items()})
        arrivals.append(dict(watch.pop("ready")))
    logged = model._get_ddp_logging_data()  # what DDP built (private, but DDP's own record)
    buckets = [
        [int(i) for i in bucket.split()]
        for bucket in logged["rebuilt_per_bucket_param_indices"].split(",")
    ]
    return {
        "bucket_cap_mb": cap_mb,
        "world_size": world_size,
        "step": min(s["step"] for s in synced),
        "compute": {k: min(s[k] for s in alone) for k in alone[0]},
        "ready": [min(a[i] for a in arrivals) for i in range(len(parameters))],
        "sizes": [p.numel() * p.element_size() for p in parameters],
        "buckets": buckets,
    }


def main():
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument(
        "--caps",
        type=positive_number("MB"),
        nargs="+",
        default=[1.0, 4.0, 25.0],
        help="bucket_cap_mb values to time (MB)",
    )
    parser.add_argument("--layers", type=positive_int, default=8)
    parser.add_argument("--width", type=positive_int, default=768)
    parser.add_argument("--batch", type=positive_int, default=32)
    parser.add_argument(
        "--steps", type=positive_int, default=8, help="timed steps of each kind (the quickest kept)"
    )
    parser.add_argument("--out", type=Path, help="write the measurements here as JSON")
    args = parser.parse_args()
    local_rank, global_rank, world_size = torchrun_env(launch_hint=LAUNCH)
    device = device_for(local_rank)
    dist.init_process_group(
        backend=dist.get_default_backend_for_device(device),
        device_id=device if device.type == "cuda" else None,  # nccl: this GPU, connect now
    )
    layer_mb = (args.width * args.width + args.width) * 4 / 2**20
    log0(
        f"model: {args.layers} x Linear({args.width}, {args.width}), {layer_mb:.2f} MB of "
        f"gradients per layer; batch {args.batch} per process, world size {world_size}"
    )
    log0(
        f"{'cap MB':>7} {'buckets':>7} {'step ms':>8} {'compute ms':>10} {'of which backward':>17}"
    )
    results = []
    for cap in args.caps:
        row = measure(cap, args, device, world_size)
        compute = row["compute"]
        log0(
            f"{cap:>7g} {len(row['buckets']):>7} {row['step'] * 1e3:>8.1f} "
            f"{compute['step'] * 1e3:>10.1f} {compute['backward'] * 1e3:>17.1f}"
        )
        results.append(row)
    if args.out and global_rank == 0:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results))
        log0(f"wrote {args.out}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    end_process()  # not Python's teardown: see common.distributed.end_process
