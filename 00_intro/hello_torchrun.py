"""Lesson 00: the first distributed job.

torchrun starts N copies of this script. Each copy is a *process* with a *rank*; they
meet at a *rendezvous*, form a *process group*, and run one *collective*: an
all_reduce that adds up every process's rank, so each one ends up holding
0 + 1 + ... + (N-1).

Launch it (from any folder, with the path to this file):

    torchrun --standalone --nproc_per_node=2 hello_torchrun.py
    torchrun --standalone --nproc_per_node=4 hello_torchrun.py

On a machine with GPUs each process takes the GPU of its local rank and talks nccl;
on a CPU-only machine every process uses the CPU and talks gloo.
"""

import os

import torch
import torch.distributed as dist

from common.cli import LessonArgumentParser
from common.distributed import device_for, end_process, log, torchrun_env

LAUNCH = "torchrun --standalone --nproc_per_node=2 hello_torchrun.py"


def main():
    LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH).parse_args()
    local_rank, global_rank, world_size = torchrun_env(launch_hint=LAUNCH)

    device = device_for(local_rank)
    backend = dist.get_default_backend_for_device(device)
    # Reads MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE from the environment that
    # torchrun set, and blocks until all world_size processes have joined.
    dist.init_process_group(
        backend=backend,
        # On a GPU, device_id binds this process to its GPU: nccl connects now (a wrong
        # setup fails here, not at the first all-reduce) and barrier() knows the GPU.
        device_id=device if device.type == "cuda" else None,
    )

    log(
        f"pid={os.getpid()} rank={global_rank} local_rank={local_rank} "
        f"world_size={world_size} backend={dist.get_backend()} device={device}"
    )

    # Every process contributes its rank; after the call every process holds the sum.
    value = torch.tensor([float(global_rank)], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    expected = world_size * (world_size - 1) // 2
    log(f"all_reduce(SUM) of the ranks = {value.item():g} (expected {expected})")

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    end_process()  # not Python's teardown: see common.distributed.end_process
