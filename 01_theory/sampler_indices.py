"""Lesson 01: which samples each rank trains on — DistributedSampler, per rank and
per epoch.

Every rank builds the same sampler over the same dataset; the sampler uses the rank
and the world size to pick this rank's share. No data moves between processes: each
one computes its own indices. Rank 0 collects them and prints one table per case:

- shuffled, with `set_epoch(epoch)`: a new order every epoch, shards still disjoint;
- shuffled, without `set_epoch`: the *same* order every epoch (a classic mistake);
- a dataset that the world size does not divide: padded by repeating the first
  indices of the order, so every rank gets as many samples (and takes as many steps);
- `drop_last=True`: the leftovers are dropped instead.

Launch it (from any folder, with the path to this file):

    torchrun --standalone --nproc_per_node=4 sampler_indices.py
    torchrun --standalone --nproc_per_node=3 sampler_indices.py --dataset_size 20 --epochs 3
"""

import math
import sys
from collections import Counter

import torch.distributed as dist
from torch.utils.data import DistributedSampler

from common.cli import LessonArgumentParser
from common.distributed import device_for, end_process, log0, torchrun_env

LAUNCH = "torchrun --standalone --nproc_per_node=4 sampler_indices.py"


def indices(dataset_size, epoch, shuffle=True, call_set_epoch=True, drop_last=False):
    """This rank's indices in `epoch` (rank and world size come from the group)."""
    sampler = DistributedSampler(range(dataset_size), shuffle=shuffle, seed=0, drop_last=drop_last)
    if call_set_epoch:
        sampler.set_epoch(epoch)
    # Without set_epoch the sampler keeps epoch 0: the loop below only pretends
    # that time passes, as a training loop that forgets the call would.
    return list(sampler)


def show_and_check(title, dataset_size, epochs, world_size, **options):
    """Print every rank's indices for every epoch; return the problems found."""
    table = []
    for epoch in range(epochs):
        shards = [None] * world_size
        dist.all_gather_object(shards, indices(dataset_size, epoch, **options))
        table.append(shards)
    log0(f"== {title}")
    for epoch, shards in enumerate(table):
        row = " | ".join(f"rank {rank}: {shard}" for rank, shard in enumerate(shards))
        log0(f"   epoch {epoch} | {row}")

    problems = []
    drop_last = options.get("drop_last", False)
    per_rank = dataset_size // world_size if drop_last else math.ceil(dataset_size / world_size)
    for epoch, shards in enumerate(table):
        counts = Counter(i for shard in shards for i in shard)
        if any(len(shard) != per_rank for shard in shards):
            problems.append(f"epoch {epoch}: shard sizes {[len(s) for s in shards]} != {per_rank}")
        repeated = sum(n - 1 for n in counts.values())
        if drop_last:
            if repeated or len(counts) != per_rank * world_size:
                problems.append(f"epoch {epoch}: drop_last shards overlap or lose too much")
        else:
            if set(counts) != set(range(dataset_size)):
                problems.append(f"epoch {epoch}: the shards do not cover the dataset")
            if repeated != per_rank * world_size - dataset_size:
                problems.append(f"epoch {epoch}: {repeated} repeated indices")
    log0(
        f"   check: {per_rank} samples per rank, "
        + (
            f"{dataset_size - per_rank * world_size} dropped"
            if drop_last
            else f"every index covered, {per_rank * world_size - dataset_size} padded"
        )
        + (f", epochs differ: {table[0] != table[1]}" if epochs > 1 else "")
    )
    return table, problems


def main():
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument("--dataset_size", type=int, default=12, help="divisible case")
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    if args.dataset_size < 1 or args.epochs < 2:
        parser.error("--dataset_size must be at least 1 and --epochs at least 2")
    local_rank, global_rank, world_size = torchrun_env(launch_hint=LAUNCH)
    device = device_for(local_rank)
    dist.init_process_group(
        backend=dist.get_default_backend_for_device(device),
        device_id=device if device.type == "cuda" else None,  # nccl: this GPU, connect now
    )

    size, epochs = args.dataset_size, args.epochs
    uneven = size + 1 if (size + 1) % world_size else size + 2  # one the world doesn't divide
    with_epoch, problems = show_and_check(
        f"{size} samples, shuffle=True, set_epoch(epoch) each epoch", size, epochs, world_size
    )
    without_epoch, more = show_and_check(
        f"{size} samples, shuffle=True, set_epoch never called",
        size,
        epochs,
        world_size,
        call_set_epoch=False,
    )
    problems += more
    problems += show_and_check(
        f"{uneven} samples, shuffle=False: padded with the first indices",
        uneven,
        epochs,
        world_size,
        shuffle=False,
    )[1]
    problems += show_and_check(
        f"{uneven} samples, drop_last=True", uneven, epochs, world_size, drop_last=True
    )[1]
    if with_epoch[0] == with_epoch[1]:
        problems.append("set_epoch did not change the order")
    if any(epoch != without_epoch[0] for epoch in without_epoch):
        problems.append("without set_epoch the order changed")
    if problems:
        log0("WRONG: " + "; ".join(problems))
        sys.exit(1)
    log0(
        "shards cover the dataset, disjoint unless padded (padding repeats the first "
        "indices); set_epoch reshuffles, forgetting it does not"
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    end_process()  # not Python's teardown: see common.distributed.end_process
