"""Lesson 03: the same training, launched by torchrun, surviving crashes.

`multigpu.py` with its launcher taken out and fault tolerance put in: torchrun starts
the processes, rank 0 saves a snapshot every `save_every` epochs, every process that
starts resumes from it, and torchrun (given `--max-restarts`) restarts a failed group.

Launch it (from any folder, with the path to this file):

    torchrun --standalone --nproc_per_node=2 multigpu_torchrun.py 20 5
    torchrun --standalone --nproc_per_node=2 --max-restarts=3 multigpu_torchrun.py 20 5

Kill a worker of the second (`kill -9 <pid>`): torchrun restarts the group.
Options: `--help`. It saves to, and resumes from, `snapshot.pt` in the current folder.
"""

import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

from common.cli import LessonArgumentParser, positive_int
from common.data import SyntheticRegression
from common.distributed import (
    device_for,
    end_process,
    log,
    log0,
    store_of_this_attempt,
    torchrun_env,
)
from common.models import regression_model
from common.random_state import RandomState, gather_random_states, restore_random_state
from common.snapshot import SnapshotError, load, prepare_folder, save_atomic

LAUNCH = "torchrun --standalone --nproc_per_node=2 multigpu_torchrun.py 20 5"
SNAPSHOT_KEYS = ("model", "optimizer", "epochs_run", "rng_state")
SHUFFLE_SEED = 0


def ddp_setup() -> torch.device:
    """Join the process group, as the rank this process was given; return its device."""
    # DDP: torchrun's LOCAL_RANK, RANK, WORLD_SIZE (without them: one line, and exit)
    local_rank, global_rank, world_size = torchrun_env(LAUNCH)  # one machine: gloo on loopback
    device = device_for(local_rank)  # DDP: process i of a machine owns GPU i, or the CPU
    dist.init_process_group(  # DDP: nccl between GPUs, gloo between CPUs
        backend=dist.get_default_backend_for_device(device),
        store=store_of_this_attempt(LAUNCH),  # torchrun's, under this attempt's prefix
        rank=global_rank,
        world_size=world_size,
        # On a GPU, device_id binds this process to its GPU: nccl connects now (a wrong
        # setup fails here, not at the first all-reduce) and barrier() knows the GPU.
        device_id=device if device.type == "cuda" else None,
    )
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")  # by this node's torchrun
    log(
        f"pid={os.getpid()} rank={global_rank} local_rank={local_rank} "
        f"world_size={world_size} restart={restart} device={device}"
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
        snapshot_path: Path,
    ) -> None:
        self.device = device
        self.global_rank = dist.get_rank()
        self.model = model.to(device)
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.snapshot_path = snapshot_path
        self.epochs_run = 0  # epochs finished
        prepare_folder(snapshot_path)  # a path that cannot hold one: one line, now
        # Before the DDP wrap, on every rank: each replica resumes from the same state.
        if snapshot_path.exists():
            self._load_snapshot(snapshot_path)
        # DDP: broadcasts rank 0's weights to every rank, then averages the gradients of
        # every backward pass. device_ids names the one device this replica lives on.
        self.model = DDP(self.model, device_ids=[device.index] if device.type == "cuda" else None)

    def _load_snapshot(self, snapshot_path: Path) -> None:
        # map_location: onto *this* process's device. load() runs no code from the file.
        snapshot = load(snapshot_path, SNAPSHOT_KEYS, map_location=self.device)
        self.model.load_state_dict(snapshot["model"])
        self.optimizer.load_state_dict(snapshot["optimizer"])  # momentum buffers
        # Each rank's own generators (CPU, and its GPU's), as it left them.
        notice = restore_random_state(snapshot["rng_state"], self.device)
        if notice:
            log0(notice)
        self.epochs_run = snapshot["epochs_run"]
        log(
            f"resumed from {snapshot_path}: {self.epochs_run} epochs done, "
            f"continuing at epoch {self.epochs_run}"
        )

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

    def _save_snapshot(self, epochs_run: int, random_states: list[RandomState]) -> None:
        snapshot = {
            # model.module is the model DDP wraps: plain names ("weight"), loadable
            # without DDP and before the wrap.
            "model": self.model.module.state_dict(),  # DDP
            "optimizer": self.optimizer.state_dict(),
            # The epochs *finished*: a resume starts at the first epoch not trained.
            "epochs_run": epochs_run,
            "rng_state": random_states,  # every rank's random generators, in rank order
        }
        # Temporary file, fsync, rename: a crash mid-write leaves the previous snapshot.
        save_atomic(snapshot, self.snapshot_path)
        log0(f"epoch {epochs_run - 1} | snapshot saved to {self.snapshot_path}")

    def train(self, max_epochs: int) -> None:
        for epoch in range(self.epochs_run, max_epochs):
            self._run_epoch(epoch)
            # After every save_every-th epoch, and after the last one, so the file
            # always ends up holding the trained model.
            if (epoch + 1) % self.save_every == 0 or epoch + 1 == max_epochs:
                # The random generators are each rank's own: gather them. A collective,
                # so every rank calls it, here, outside the branch below.
                random_states = gather_random_states(self.device)
                # Every replica holds the same weights, so one writer is enough. No
                # collective (all_reduce, barrier, a DDP forward) may sit inside this
                # branch: the writer would wait in it for ranks that never enter it.
                if self.global_rank == 0:  # DDP
                    self._save_snapshot(epoch + 1, random_states)
        log0(f"training finished: {max_epochs} epochs")


def load_train_objs() -> tuple[Dataset, torch.nn.Module, torch.optim.Optimizer]:
    train_set = SyntheticRegression(size=2048)
    model = regression_model(seed=0)
    # Momentum: an optimizer state (a running average of the gradients) to resume.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return train_set, model, optimizer


def prepare_dataloader(dataset: Dataset, batch_size: int, device: torch.device) -> DataLoader:
    # Each rank gets a different 1/world_size of every epoch's shuffled indices.
    sampler = DistributedSampler(dataset, shuffle=True, seed=SHUFFLE_SEED)  # DDP
    return DataLoader(
        dataset, batch_size=batch_size, sampler=sampler, pin_memory=device.type == "cuda"
    )


@record  # torchrun's failure report shows whatever a worker raises, with its traceback
def main(
    total_epochs: int,
    save_every: int,
    batch_size: int,
    snapshot_path: Path,
) -> int:
    device = ddp_setup()
    dataset, model, optimizer = load_train_objs()
    train_data = prepare_dataloader(dataset, batch_size, device)
    try:
        trainer = Trainer(model, train_data, optimizer, device, save_every, snapshot_path)
    except SnapshotError as error:
        log(str(error))  # one line that names the file and what to do, not a traceback
        dist.destroy_process_group()
        return 1
    trainer.train(total_epochs)
    dist.destroy_process_group()  # DDP
    return 0


if __name__ == "__main__":
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument("total_epochs", type=positive_int, help="how many epochs to train")
    parser.add_argument("save_every", type=positive_int, help="save a snapshot every N epochs")
    parser.add_argument(
        "--batch_size", type=positive_int, default=32, help="samples per step per process"
    )
    parser.add_argument(
        "--snapshot_path", type=Path, default=Path("snapshot.pt"), help="where to save/resume"
    )
    args = parser.parse_args()
    exit_code = main(args.total_epochs, args.save_every, args.batch_size, args.snapshot_path)
    end_process(exit_code)  # not Python's teardown: see common.distributed.end_process
