"""Lesson 02: the baseline, training on one device in one process.

A `Trainer` with a batch step, an epoch loop and a checkpoint every `save_every`
epochs, on a seeded dataset that a linear model can learn: the loss printed at every
epoch falls from about 20 to the noise floor (about 0.01).

Launch it (from any folder, with the path to this file):

    python single_gpu.py 20 5                  # 20 epochs, a checkpoint every 5
    python single_gpu.py 20 5 --batch_size 64

It writes `checkpoint.pt` (the model's weights) to the current folder.
"""

from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, RandomSampler

from common.cli import LessonArgumentParser, positive_int
from common.data import SyntheticRegression
from common.distributed import (
    device_for,
    log0,
)
from common.models import regression_model
from common.snapshot import save_atomic

LAUNCH = "python single_gpu.py 20 5 [--batch_size 32]"
CHECKPOINT_PATH = Path("checkpoint.pt")
SHUFFLE_SEED = 0


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
        self.model = model.to(device)
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every

    def _run_batch(self, source: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad()
        output = self.model(source)
        loss = F.mse_loss(output, targets)
        loss.backward()
        self.optimizer.step()
        return loss.detach()  # not .item(): on a GPU that would wait for every step

    def _run_epoch(self, epoch: int) -> None:
        # The order of epoch e depends on e alone, so every run (and every restart)
        # sees the same batches: what DistributedSampler.set_epoch does in multigpu.py.
        self.train_data.sampler.generator.manual_seed(SHUFFLE_SEED + epoch)
        total_loss = torch.zeros((), dtype=torch.float64, device=self.device)
        for source, targets in self.train_data:
            source = source.to(self.device, non_blocking=True)  # from pinned memory, on a GPU
            targets = targets.to(self.device, non_blocking=True)
            total_loss += self._run_batch(source, targets)
        steps = len(self.train_data)
        batch_size = self.train_data.batch_size
        world_size = 1  # one process
        epoch_loss = total_loss.item() / (steps * world_size)
        log0(
            f"epoch {epoch} | world size {world_size} | batch size {batch_size} per rank "
            f"| steps {steps} | loss {epoch_loss:.6f}"
        )

    def _save_checkpoint(self, epoch: int) -> None:
        save_atomic(self.model.state_dict(), CHECKPOINT_PATH)
        log0(f"epoch {epoch} | checkpoint saved to {CHECKPOINT_PATH.resolve()}")

    def train(self, max_epochs: int) -> None:
        for epoch in range(max_epochs):
            self._run_epoch(epoch)
            # After every save_every-th epoch, and after the last one, so the file
            # always ends up holding the trained model.
            if (epoch + 1) % self.save_every == 0 or epoch + 1 == max_epochs:
                self._save_checkpoint(epoch)
        log0(f"training finished: {max_epochs} epochs")


def load_train_objs() -> tuple[Dataset, torch.nn.Module, torch.optim.Optimizer]:
    train_set = SyntheticRegression(size=2048)
    model = regression_model(seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    return train_set, model, optimizer


def prepare_dataloader(dataset: Dataset, batch_size: int, device: torch.device) -> DataLoader:
    # The sampler's own generator (one given to the DataLoader would also seed workers).
    sampler = RandomSampler(dataset, generator=torch.Generator())
    return DataLoader(
        dataset, batch_size=batch_size, sampler=sampler, pin_memory=device.type == "cuda"
    )


def main(
    total_epochs: int,
    save_every: int,
    batch_size: int,
) -> None:
    device = device_for(local_rank=0)
    dataset, model, optimizer = load_train_objs()
    train_data = prepare_dataloader(dataset, batch_size, device)
    trainer = Trainer(model, train_data, optimizer, device, save_every)
    trainer.train(total_epochs)


if __name__ == "__main__":
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument("total_epochs", type=positive_int, help="how many epochs to train")
    parser.add_argument("save_every", type=positive_int, help="save a checkpoint every N epochs")
    parser.add_argument(
        "--batch_size", type=positive_int, default=32, help="samples per step per process"
    )
    args = parser.parse_args()
    main(args.total_epochs, args.save_every, args.batch_size)
