"""Lesson 02: how much faster is an epoch with more processes?

Trains `common.models.scaling_model` (a 1-million-parameter perceptron, heavy enough
that computing a step costs far more than averaging its gradients) with DDP and times
every epoch. The batch size is per process, as in `multigpu.py`: with N processes each
one computes 1/N of the epoch's steps, so the ideal epoch time is 1/N of one
process's, until the processes run out of cores.

Launch it (from any folder, with the path to this file):

    torchrun --standalone --nproc_per_node=1 scaling.py                # one core
    torchrun --standalone --nproc_per_node=2 scaling.py                # two processes
    torchrun --standalone --nproc_per_node=1 scaling.py --threads 1 2  # then two cores

`--threads` sets the intra-op threads of each process (torchrun sets 1 when it starts
several processes); given several counts, the run times `--epochs` epochs with each
in turn. After each, rank 0 prints a summary line with the median time per epoch
over the epochs after the first (which pays for warming up). On GPUs the loop makes
no per-step wait of its own: batches come from pinned memory and are copied without
blocking, the loss is summed on the GPU, and the GPU is synchronized once per epoch,
where the clock is read.
"""

import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from common.cli import LessonArgumentParser
from common.data import SyntheticRegression
from common.distributed import device_for, end_process, log0, torchrun_env
from common.models import scaling_model

LAUNCH = "torchrun --standalone --nproc_per_node=2 scaling.py [--threads 1] [--samples 8192]"


def main() -> None:
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument("--epochs", type=int, default=3, help="epochs to time (at least 2)")
    parser.add_argument("--samples", type=int, default=8192, help="samples per epoch")
    parser.add_argument("--batch_size", type=int, default=128, help="samples per step per process")
    parser.add_argument("--width", type=int, default=1024, help="hidden width of the model")
    parser.add_argument(
        "--threads", type=int, nargs="+", default=[1], help="intra-op threads per process"
    )
    args = parser.parse_args()
    for name in ("epochs", "samples", "batch_size", "width"):
        if getattr(args, name) < (2 if name == "epochs" else 1):
            parser.error(f"--{name} {getattr(args, name)} is too small")
    if min(args.threads) < 1:
        parser.error("--threads must be at least 1")
    local_rank, _, world_size = torchrun_env(launch_hint=LAUNCH)

    device = device_for(local_rank)
    dist.init_process_group(
        backend=dist.get_default_backend_for_device(device),
        device_id=device if device.type == "cuda" else None,  # nccl: this GPU, connect now
    )
    dataset = SyntheticRegression(size=args.samples)
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    # On a GPU, pinned batches can be copied without making the CPU wait for the GPU.
    on_gpu = device.type == "cuda"
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, pin_memory=on_gpu)
    model = DDP(
        scaling_model(seed=0, width=args.width).to(device),
        device_ids=[device.index] if device.type == "cuda" else None,
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

    epoch = 0
    for threads in args.threads:
        torch.set_num_threads(threads)
        epoch_seconds = []
        for _ in range(args.epochs):
            sampler.set_epoch(epoch)
            dist.barrier()  # start every rank's clock together
            started = time.perf_counter()
            # Summed on the device: loss.item() would wait for the GPU at every step.
            total_loss = torch.zeros(1, device=device)
            for source, targets in loader:
                source = source.to(device, non_blocking=on_gpu)
                targets = targets.to(device, non_blocking=on_gpu)
                optimizer.zero_grad()
                loss = F.mse_loss(model(source), targets)
                loss.backward()
                optimizer.step()
                total_loss += loss.detach()
            if on_gpu:
                torch.cuda.synchronize(device)  # the epoch's work is done: read the clock
            # An epoch ends when its slowest rank ends.
            seconds = torch.tensor([time.perf_counter() - started], device=device)
            dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
            epoch_loss = total_loss / len(loader)
            dist.all_reduce(epoch_loss, op=dist.ReduceOp.SUM)
            epoch_seconds.append(seconds.item())
            log0(
                f"epoch {epoch} | threads {threads} | {seconds.item():.3f} s "
                f"| loss {epoch_loss.item() / world_size:.4f}"
            )
            epoch += 1

        median = statistics.median(epoch_seconds[1:])
        log0(
            f"summary | processes {world_size} | threads per process {threads} "
            f"| steps per rank {len(loader)} | batch {args.batch_size} per rank "
            f"| median epoch {median:.3f} s | samples/s {args.samples / median:.0f}"
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    end_process()  # not Python's teardown: see common.distributed.end_process
