"""Lesson 02: the same training, data parallel over several processes on one machine.

`single_gpu.py` plus distributed data parallel: the script starts one process per
device (`mp.spawn`), each trains a DDP replica of the model on its own shard of every
epoch (`DistributedSampler`), DDP averages the gradients, and rank 0 alone saves.

Launch it (from any folder, with the path to this file):

    python multigpu.py 20 5                    # 20 epochs, a checkpoint every 5
    python multigpu.py 20 5 --batch_size 32 --world_size 2

`--batch_size` is per process; `--world_size` defaults to the GPUs, or 2 without one.
It writes `checkpoint.pt` (the model's weights) to the current folder.
"""

from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

from common.cli import LessonArgumentParser, positive_int
from common.data import SyntheticRegression
from common.distributed import (
    device_for,
    device_type,
    end_process,
    log0,
    spawned_on_one_machine,
)
from common.models import regression_model
from common.ports import free_port
from common.snapshot import save_atomic

LAUNCH = "python multigpu.py 20 5 [--batch_size 32] [--world_size 2]"
CHECKPOINT_PATH = Path("checkpoint.pt")
SHUFFLE_SEED = 0


def ddp_setup(global_rank: int, world_size: int, port: int) -> torch.device:
    """Join the process group, as the rank this process was given; return its device."""
    local_rank = global_rank  # DDP: on one machine, a process's local rank is its rank
    spawned_on_one_machine(world_size)  # gloo over loopback; each its share of the cores
    device = device_for(local_rank)  # DDP: process i of a machine owns GPU i, or the CPU
    dist.init_process_group(  # DDP: nccl between GPUs, gloo between CPUs
        backend=dist.get_default_backend_for_device(device),
        init_method=f"tcp://127.0.0.1:{port}",
        rank=global_rank,
        world_size=world_size,
        # On a GPU, device_id binds this process to its GPU: nccl connects now (a wrong
        # setup fails here, not at the first all-reduce) and barrier() knows the GPU.
        device_id=device if device.type == "cuda" else None,
    )
    return device


class Trainer:
    def __init__(
        self,
        model: torch.nn.Module,
        train_data: DataLoader,
        optimizer: torch.optim.Optimizer,
        device: torch.device,
        save_every: int,
    ) -> None:
        self.device = device
        self.global_rank = dist.get_rank()
        self.model = model.to(device)
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        # DDP: broadcasts rank 0's weights to every rank, then averages the gradients of
        # every backward pass. device_ids names the one device this replica lives on.
        self.model = DDP(self.model, device_ids=[device.index] if device.type == "cuda" else None)

    def _run_batch(self, source: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad()
        output = self.model(source)
        loss = F.mse_loss(output, targets)
        loss.backward()  # DDP averages the gradients over the ranks as they are computed
        self.optimizer.step()
        return loss.detach()  # not .item(): on a GPU that would wait for every step

    def _run_epoch(self, epoch: int) -> None:
        # The sampler shuffles with seed + epoch: without set_epoch every epoch would
        # repeat the order of epoch 0.
        self.train_data.sampler.set_epoch(epoch)  # DDP
        total_loss = torch.zeros((), dtype=torch.float64, device=self.device)
        for source, targets in self.train_data:
            source = source.to(self.device, non_blocking=True)  # from pinned memory, on a GPU
            targets = targets.to(self.device, non_blocking=True)
            total_loss += self._run_batch(source, targets)
        steps = len(self.train_data)
        batch_size = self.train_data.batch_size
        # Each rank saw its own shard; the epoch's loss is the average over all ranks.
        dist.all_reduce(total_loss, op=dist.ReduceOp.SUM)  # DDP
        world_size = dist.get_world_size()
        epoch_loss = total_loss.item() / (steps * world_size)
        log0(
            f"epoch {epoch} | world size {world_size} | batch size {batch_size} per rank "
            f"| steps {steps} | loss {epoch_loss:.6f}"
        )

    def _save_checkpoint(self, epoch: int) -> None:
        # model.module is the model DDP wraps: plain names ("weight"), loadable
        # without DDP, by single_gpu.py too.
        save_atomic(self.model.module.state_dict(), CHECKPOINT_PATH)  # DDP
        log0(f"epoch {epoch} | checkpoint saved to {CHECKPOINT_PATH.resolve()}")

    def train(self, max_epochs: int) -> None:
        for epoch in range(max_epochs):
            self._run_epoch(epoch)
            # After every save_every-th epoch, and after the last one, so the file
            # always ends up holding the trained model.
            if (epoch + 1) % self.save_every == 0 or epoch + 1 == max_epochs:
                # Every replica holds the same weights, so one writer is enough. No
                # collective (all_reduce, barrier, a DDP forward) may sit inside this
                # branch: the writer would wait in it for ranks that never enter it.
                if self.global_rank == 0:  # DDP
                    self._save_checkpoint(epoch)
        log0(f"training finished: {max_epochs} epochs")


def load_train_objs() -> tuple[Dataset, torch.nn.Module, torch.optim.Optimizer]:
    train_set = SyntheticRegression(size=2048)
    model = regression_model(seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    return train_set, model, optimizer


def prepare_dataloader(dataset: Dataset, batch_size: int, device: torch.device) -> DataLoader:
    # Each rank gets a different 1/world_size of every epoch's shuffled indices.
    sampler = DistributedSampler(dataset, shuffle=True, seed=SHUFFLE_SEED)  # DDP
    return DataLoader(
        dataset, batch_size=batch_size, sampler=sampler, pin_memory=device.type == "cuda"
    )


def main(
    global_rank: int,
    world_size: int,
    port: int,
    total_epochs: int,
    save_every: int,
    batch_size: int,
) -> None:
    device = ddp_setup(global_rank, world_size, port)
    dataset, model, optimizer = load_train_objs()
    train_data = prepare_dataloader(dataset, batch_size, device)
    trainer = Trainer(model, train_data, optimizer, device, save_every)
    trainer.train(total_epochs)
    dist.destroy_process_group()  # DDP
    end_process()  # not Python's teardown: see common.distributed.end_process


if __name__ == "__main__":
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument("total_epochs", type=positive_int, help="how many epochs to train")
    parser.add_argument("save_every", type=positive_int, help="save a checkpoint every N epochs")
    parser.add_argument(
        "--batch_size", type=positive_int, default=32, help="samples per step per process"
    )
    gpus = torch.cuda.device_count() if device_type() == "cuda" else 0
    parser.add_argument("--world_size", type=positive_int, default=gpus or 2, help="processes")
    args = parser.parse_args()
    if gpus and args.world_size > gpus:
        parser.error(f"--world_size {args.world_size} needs a GPU per process; there are {gpus}")
    # DDP: mp.spawn starts world_size processes running main(i, *args), i = 0 ..
    # world_size - 1, and raises here if any of them fails.
    port = free_port()
    spawned = (args.world_size, port, args.total_epochs, args.save_every, args.batch_size)
    mp.spawn(main, args=spawned, nprocs=args.world_size)  # DDP
