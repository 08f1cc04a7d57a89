"""Lesson 02: save a checkpoint on rank 0, wait at a barrier, load it everywhere.

Every rank starts from different weights (each seeds its model with its own rank,
on purpose). Rank 0 saves its model; every rank waits at `dist.barrier()` until the
file is complete; then every rank loads it with `map_location` and ends up holding
rank 0's weights. This is how a job resumes from a checkpoint (lesson 03 does it for
real): one writer, a barrier, every reader.

Launch it (from any folder, with the path to this file):

    torchrun --standalone --nproc_per_node=2 checkpoint_barrier.py
    torchrun --standalone --nproc_per_node=2 checkpoint_barrier.py --path ckpt/model.pt

It writes the checkpoint to `--path` (default `barrier_checkpoint.pt` in the current
folder).
"""

from pathlib import Path

import torch
import torch.distributed as dist

from common.cli import LessonArgumentParser
from common.distributed import device_for, end_process, log, torchrun_env
from common.models import regression_model
from common.snapshot import save_atomic

LAUNCH = "torchrun --standalone --nproc_per_node=2 checkpoint_barrier.py [--path FILE]"


def checksum(model: torch.nn.Module) -> float:
    """One number that differs when the weights differ (for the log, not a hash)."""
    return sum(p.double().sum().item() * (i + 1) for i, p in enumerate(model.parameters()))


def main() -> None:
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument("--path", type=Path, default=Path("barrier_checkpoint.pt"))
    args = parser.parse_args()
    local_rank, global_rank, world_size = torchrun_env(launch_hint=LAUNCH)
    device = device_for(local_rank)
    dist.init_process_group(
        backend=dist.get_default_backend_for_device(device),
        device_id=device if device.type == "cuda" else None,  # nccl: this GPU, connect now
    )

    model = regression_model(seed=global_rank).to(device)
    log(f"before: weights checksum {checksum(model):+.6f}")

    if global_rank == 0:
        # Only file I/O in here: a collective in this branch would wait for ranks
        # that never enter it.
        save_atomic(model.state_dict(), args.path)
        log(f"saved {args.path}")
    # Nobody reads before rank 0 has finished writing. Ranks that reach the barrier
    # first wait there; it returns on every rank once all have arrived.
    dist.barrier()

    # Tensors are saved with their device: a GPU checkpoint written by rank 0 names
    # cuda:0, and without map_location every rank would load it onto GPU 0.
    map_location = {"cuda:0": str(device)} if device.type == "cuda" else device
    state = torch.load(args.path, map_location=map_location, weights_only=True)
    model.load_state_dict(state)
    devices = sorted({str(tensor.device) for tensor in state.values()})
    log(f"after: weights checksum {checksum(model):+.6f} (loaded onto {', '.join(devices)})")

    # The proof, in numbers: every rank now holds exactly rank 0's weights.
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world_size)]
    dist.all_gather(gathered, flat)
    if global_rank == 0:
        same = all(torch.equal(other, flat) for other in gathered)
        log(f"all {world_size} ranks hold rank 0's weights: {same}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    end_process()  # not Python's teardown: see common.distributed.end_process
