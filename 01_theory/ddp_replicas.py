"""Lesson 01: what DDP does to keep N replicas of a model equal.

1. The constructor broadcasts rank 0's parameters: every rank builds its model from a
   *different* seed on purpose, and after `DDP(model)` they are all rank 0's.
2. Every backward pass averages the gradients over the ranks, so N ranks that each
   see 1/N of a batch take exactly the step that one process takes on the whole
   batch. Three models train side by side on every rank, from the same start:
   - `DDP`: the real thing, on this rank's shard (DistributedSampler);
   - `by hand`: a plain model on the same shard, whose gradients this script averages
     itself with the hand-written ring (`common.ring.ring_all_reduce`), divided by N;
   - `one process`: a plain model on the whole global batch (every rank's shard put
     together), no communication at all.
   After every step all three must hold the same parameters (to float rounding).

Launch it (from any folder, with the path to this file):

    torchrun --standalone --nproc_per_node=2 ddp_replicas.py
    torchrun --standalone --nproc_per_node=4 ddp_replicas.py --epochs 3 --batch_size 8
"""

import torch
import torch.distributed as dist
from torch.nn.functional import mse_loss
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from common.cli import LessonArgumentParser
from common.data import SyntheticRegression
from common.distributed import device_for, end_process, log, log0, torchrun_env
from common.models import regression_model
from common.ring import ring_all_reduce

LAUNCH = "torchrun --standalone --nproc_per_node=2 ddp_replicas.py"
LEARNING_RATE = 0.05
TOLERANCE = 1e-5  # float32 sums in another order differ in the last bits, no more


def fingerprint(model) -> str:
    weight = model.weight.detach().flatten()
    return f"weight[:3]={[round(v, 4) for v in weight[:3].tolist()]} bias={model.bias.item():.4f}"


def largest_difference(model_a, model_b) -> float:
    return max(
        (a.detach() - b.detach()).abs().max().item()
        for a, b in zip(model_a.parameters(), model_b.parameters(), strict=True)
    )


def global_batches(dataset, world_size, batch_size, epoch, seed):
    """The batches one process would see: step k's batch is every rank's k-th batch
    put together, each rank's indices chosen exactly as its DistributedSampler does."""
    per_rank = []
    for rank in range(world_size):
        sampler = DistributedSampler(dataset, world_size, rank, shuffle=True, seed=seed)
        sampler.set_epoch(epoch)
        indices = list(sampler)
        per_rank.append([indices[i : i + batch_size] for i in range(0, len(indices), batch_size)])
    for step_indices in zip(*per_rank, strict=True):
        together = torch.tensor([i for indices in step_indices for i in indices])
        yield dataset.inputs[together], dataset.targets[together]


def main():
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=16, help="per process")
    parser.add_argument("--dataset_size", type=int, default=256)
    args = parser.parse_args()
    if min(args.epochs, args.batch_size, args.dataset_size) < 1:
        parser.error("--epochs, --batch_size and --dataset_size must be positive")
    local_rank, global_rank, world_size = torchrun_env(launch_hint=LAUNCH)
    device = device_for(local_rank)
    dist.init_process_group(
        backend=dist.get_default_backend_for_device(device),
        device_id=device if device.type == "cuda" else None,  # nccl: this GPU, connect now
    )

    # 1. Replicas that start different end equal after the constructor.
    model = regression_model(seed=100 + global_rank).to(device)  # a different seed per rank
    log(f"before DDP(model): {fingerprint(model)}")
    # One GPU per process: name it (device_ids); on the CPU there is none to name.
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    log(f"after  DDP(model): {fingerprint(ddp_model.module)}")
    everyone = [None] * world_size
    dist.all_gather_object(everyone, [p.tolist() for p in ddp_model.module.parameters()])
    assert all(other == everyone[0] for other in everyone), "replicas differ after DDP()"
    log0("the DDP constructor copied rank 0's parameters to every rank")

    # 2. Three ways to take the same steps, from the same start (rank 0's parameters).
    by_hand = regression_model().to(device)
    one_process = regression_model().to(device)
    by_hand.load_state_dict(ddp_model.module.state_dict())
    one_process.load_state_dict(ddp_model.module.state_dict())
    optimizers = {
        name: torch.optim.SGD(m.parameters(), lr=LEARNING_RATE)
        for name, m in (("ddp", ddp_model), ("by_hand", by_hand), ("one_process", one_process))
    }

    dataset = SyntheticRegression(size=args.dataset_size, seed=0)
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)  # rank, world from the group
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    worst = 0.0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
        whole = global_batches(dataset, world_size, args.batch_size, epoch, seed=0)
        loss_sum = torch.zeros(2, device=device)  # (sum of losses, number of batches)
        for (inputs, targets), (all_inputs, all_targets) in zip(loader, whole, strict=True):
            inputs, targets = inputs.to(device), targets.to(device)
            for optimizer in optimizers.values():
                optimizer.zero_grad()

            loss = mse_loss(ddp_model(inputs), targets)
            loss.backward()  # DDP averages the gradients over the ranks here
            optimizers["ddp"].step()

            mse_loss(by_hand(inputs), targets).backward()
            for parameter in by_hand.parameters():
                ring_all_reduce(parameter.grad)  # the sum over ranks ...
                parameter.grad /= world_size  # ... divided by N: the average
            optimizers["by_hand"].step()

            mse_loss(one_process(all_inputs.to(device)), all_targets.to(device)).backward()
            optimizers["one_process"].step()

            worst = max(
                worst,
                largest_difference(ddp_model.module, one_process),
                largest_difference(ddp_model.module, by_hand),
            )
            loss_sum += torch.stack([loss.detach(), torch.ones((), device=device)])
        dist.all_reduce(loss_sum)  # the loss averaged over every rank's batches
        log0(f"epoch {epoch}: loss {(loss_sum[0] / loss_sum[1]).item():.4f}")

    log0(
        f"after {args.epochs} epochs: max |DDP - one process| = "
        f"{largest_difference(ddp_model.module, one_process):.2e}, "
        f"max |DDP - by hand| = {largest_difference(ddp_model.module, by_hand):.2e}, "
        f"worst over every step = {worst:.2e}"
    )
    if worst > TOLERANCE:
        log(f"DDP, the hand-written all-reduce and one process differ by {worst:.2e}")
        raise SystemExit(1)
    log0(f"DDP == gradients averaged by hand == one process on the whole batch (tol {TOLERANCE})")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    end_process()  # not Python's teardown: see common.distributed.end_process
