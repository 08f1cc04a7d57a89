"""Lesson 05: when DDP is not enough. FSDP2 (`fully_shard`) keeps 1/N of the model
on each rank, and trains it to the same losses as DDP.

Launch it (from any folder, with the path to this file):

    torchrun --standalone --nproc_per_node=2 fsdp_shards.py
    torchrun --standalone --nproc_per_node=4 fsdp_shards.py --n-layer 8

Every rank builds the lesson's GPT twice from the same seed: one copy wrapped in DDP
(each rank holds every parameter, gradient and Adam moment), one sharded with
`fully_shard` (each rank holds a slice of each; the full weights of a block exist only
while that block computes). Both train a few steps on the same batches; each rank
reports what it holds, and the script fails if the two losses part ways.
"""

import copy

import torch
import torch.distributed as dist
from char_dataset import load_text
from model import GPT, GPTShape
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

from common.cli import LessonArgumentParser
from common.distributed import device_for, end_process, log, log0, torchrun_env

LAUNCH = "torchrun --standalone --nproc_per_node=2 fsdp_shards.py"


def local_numel(tensors) -> int:
    """Numbers this rank stores: a sharded DTensor counts only its local slice."""
    return sum(t.to_local().numel() if hasattr(t, "to_local") else t.numel() for t in tensors)


def adam_numel(optimizer) -> int:
    return sum(
        local_numel([state["exp_avg"], state["exp_avg_sq"]]) for state in optimizer.state.values()
    )


def main():
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument("--n-layer", type=int, default=4)
    parser.add_argument("--n-embd", type=int, default=128)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    local_rank, global_rank, world_size = torchrun_env(launch_hint=LAUNCH)
    device = device_for(local_rank)
    dist.init_process_group(
        backend=dist.get_default_backend_for_device(device),
        device_id=device if device.type == "cuda" else None,  # nccl: this GPU, connect now
    )

    # The vocabulary of main.py's model: the distinct characters of the default text
    # (how many depends on the Python version that ships it).
    vocab_size = len(set(load_text(None)[0]))
    torch.manual_seed(0)
    shape = GPTShape(
        vocab_size=vocab_size, block_size=64, n_layer=args.n_layer, n_head=4, n_embd=args.n_embd
    )
    reference = GPT(shape).to(device)
    sharded = copy.deepcopy(reference)
    ddp = DDP(reference, device_ids=[local_rank] if device.type == "cuda" else None)
    # The ranks to shard over, on the device in use: without a mesh, fully_shard builds
    # one on the GPU whenever there is one, even under DDP_DEVICE=cpu.
    mesh = init_device_mesh(device.type, (world_size,))
    # Shard each block on its own, then the rest: a block's weights are gathered just
    # before it runs and freed right after, so only one block is ever whole at a time.
    for block in sharded.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(sharded, mesh=mesh)

    optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (ddp, sharded)]
    generator = torch.Generator().manual_seed(100 + global_rank)  # each rank its own data
    largest_gap = 0.0
    for step in range(args.steps):
        tokens = torch.randint(0, vocab_size, (8, 65), generator=generator).to(device)
        losses = []
        for model, optimizer in zip((ddp, sharded), optimizers, strict=True):
            _, loss = model(tokens[:, :-1], tokens[:, 1:])
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            losses.append(mean.item() / world_size)
        largest_gap = max(largest_gap, abs(losses[0] - losses[1]))
        log0(f"step {step}: loss with DDP {losses[0]:.6f}, with FSDP2 {losses[1]:.6f}")

    total = sum(p.numel() for p in reference.parameters())
    held = local_numel(sharded.parameters())
    first = next(sharded.parameters())
    log0(f"a parameter of the sharded model: {type(first).__name__}, placements {first.placements}")
    log(
        f"DDP holds {total:,} parameters and {adam_numel(optimizers[0]):,} Adam numbers; "
        f"FSDP2 holds {held:,} parameters ({held / total:.1%}) and "
        f"{adam_numel(optimizers[1]):,} Adam numbers"
    )
    dist.destroy_process_group()
    if largest_gap > 1e-4:
        raise SystemExit(f"FSDP2 and DDP losses differ by {largest_gap:.2e}: they should agree")
    log0(f"FSDP2 and DDP agree: the largest loss difference is {largest_gap:.1e}")


if __name__ == "__main__":
    main()
    end_process()  # not Python's teardown: see common.distributed.end_process
