"""Lesson 04: the same training on several machines ("nodes").

`multigpu_torchrun.py` made ready for more than one node: torchrun runs on every
node, and the agents meet at a rendezvous on one of them. Each process then has a
local rank (its number on its node: it picks the device) and a global rank (its
number in the whole job: it names the process in the logs and decides who saves).
Nodes may or may not share a filesystem: the script finds out which at start-up
(rank 0 writes a random token into the snapshot folder, every process reads it
back). On a shared folder, global rank 0 saves the one snapshot; on folders of
their own, local rank 0 of every node saves a copy on its node. After loading,
every rank checks that all resumed from the same epoch, and stops with a clear
error if not, instead of hanging.

Launch it on each of two nodes (HEAD is the first node's address or name, PORT a
port free there; the same command on both):

    torchrun --nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d \\
        --rdzv_endpoint=HEAD:PORT --rdzv_id=job42 multinode.py 50 10

or on a Slurm cluster with `sbatch slurm/multinode.sbatch 50 10` (see that file).
On one machine, two agents in two terminals play two nodes (HEAD is 127.0.0.1).
`--batch_size` (default 32) is per process. It writes `snapshot.pt` to the current
folder (`--snapshot_path` to change it) and resumes from it. Crashes can be
injected as in lesson 03 (`--crash_rank R --crash_epoch E --crash_step S`).
"""

import argparse
import os
import signal
import socket
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
from common.distributed import backend_for, device_for, end_process, log, log0, torchrun_env
from common.models import regression_model
from common.snapshot import SnapshotError, load, save_atomic

LAUNCH = (
    "torchrun --nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d "
    "--rdzv_endpoint=HEAD:PORT --rdzv_id=job42 multinode.py 50 10"
)
SNAPSHOT_KEYS = ("model", "optimizer", "epochs_run", "rng_state")
SHUFFLE_SEED = 0


def ddp_setup() -> torch.device:
    """Join the process group at the address torchrun chose, as the rank it gave us."""
    local_rank, global_rank, world_size = torchrun_env(launch_hint=LAUNCH)
    device = device_for(local_rank)
    # Reads MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE from the environment.
    dist.init_process_group(backend=backend_for(device.type))
    # Counts the times torchrun restarted the group after a failure (0 on the first run).
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    # torchrun numbers the nodes too (GROUP_RANK): with c10d, in the order they joined.
    node_rank = os.environ.get("GROUP_RANK", "0")
    log(
        f"pid={os.getpid()} host={socket.gethostname()} node={node_rank} "
        f"local_rank={local_rank} rank={global_rank} world_size={world_size} "
        f"restart={restart} device={device}"
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
        crash_at: tuple[int, int, int] | None = None,
    ) -> None:
        self.device = device
        # Local rank: which device on this node. Global rank: who in the whole job.
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.global_rank = int(os.environ["RANK"])
        self.model = model.to(device)
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.snapshot_path = snapshot_path
        self.crash_at = crash_at  # (rank, epoch, step) at which to die, or None
        self.epochs_run = 0
        # One snapshot on a shared folder; else one per node, each on its own disk.
        shared = snapshot_folder_is_shared(snapshot_path, device)
        self.saves_snapshot = self.global_rank == 0 if shared else self.local_rank == 0
        log0(
            f"snapshot folder {snapshot_path.parent.resolve()} is "
            + (
                "shared by all nodes: global rank 0 saves"
                if shared
                else "not shared: local rank 0 of every node saves a copy"
            )
        )
        # Before the DDP wrap, on every rank: each replica resumes from the same state.
        if snapshot_path.exists():
            self._load_snapshot(snapshot_path)
        self._check_same_epoch()
        # Broadcasts rank 0's weights to every rank, then averages the gradients of
        # every backward pass. device_ids names the one device this replica lives on.
        self.model = DDP(self.model, device_ids=[device.index] if device.type == "cuda" else None)

    def _load_snapshot(self, snapshot_path: Path) -> None:
        # map_location: the tensors go to *this* process's device, whatever device the
        # saving process had. load() runs no code from the file (weights_only=True).
        snapshot = load(snapshot_path, SNAPSHOT_KEYS, map_location=self.device)
        self.model.load_state_dict(snapshot["model"])
        self.optimizer.load_state_dict(snapshot["optimizer"])  # momentum buffers
        torch.set_rng_state(snapshot["rng_state"].cpu())  # anything random goes on alike
        self.epochs_run = snapshot["epochs_run"]
        log(
            f"resumed from {snapshot_path}: {self.epochs_run} epochs done, "
            f"continuing at epoch {self.epochs_run}"
        )

    def _check_same_epoch(self) -> None:
        """Every rank must resume from the same epoch. Nodes that loaded different
        snapshots (or none) would run different numbers of epochs, and so of
        collectives: the job would hang at the end. Stop now, and say why."""
        node_rank = int(os.environ.get("GROUP_RANK", 0))
        mine = torch.tensor([self.epochs_run, node_rank], device=self.device)
        everyone = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
        dist.all_gather(everyone, mine)
        epochs = [int(pair[0]) for pair in everyone]
        if len(set(epochs)) > 1:
            where = ", ".join(
                f"rank {rank} on node {int(pair[1])}: {int(pair[0])}"
                for rank, pair in enumerate(everyone)
            )
            raise ResumeMismatch(
                f"ranks resumed from different epochs (epochs run: {where}): the nodes "
                f"loaded different snapshots; put --snapshot_path on a filesystem all nodes "
                f"share, or copy the newest {self.snapshot_path.name} to every node"
            )

    def _run_batch(self, source: torch.Tensor, targets: torch.Tensor) -> float:
        self.optimizer.zero_grad()
        output = self.model(source)
        loss = F.mse_loss(output, targets)
        loss.backward()  # returns once the gradients are averaged over the ranks
        self.optimizer.step()
        return loss.item()

    def _crash_if_planned(self, epoch: int, step: int) -> None:
        # Only on torchrun's first attempt, so the restarted group gets past this point.
        first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
        if first_attempt and self.crash_at == (self.global_rank, epoch, step):
            log(f"injected failure: pid {os.getpid()} kills itself at epoch {epoch} step {step}")
            # SIGKILL, like the out-of-memory killer: no exception, no clean-up, no goodbye.
            os.kill(os.getpid(), signal.SIGKILL)

    def _run_epoch(self, epoch: int) -> None:
        # The sampler shuffles with seed + epoch: without set_epoch every epoch would
        # repeat the order of epoch 0.
        self.train_data.sampler.set_epoch(epoch)
        total_loss = 0.0
        for step, (source, targets) in enumerate(self.train_data):
            self._crash_if_planned(epoch, step)
            source, targets = source.to(self.device), targets.to(self.device)
            total_loss += self._run_batch(source, targets)
        steps = len(self.train_data)
        batch_size = self.train_data.batch_size
        # Each rank saw its own shard; the epoch's loss is the average over all ranks.
        summed = torch.tensor([total_loss / steps], device=self.device)
        dist.all_reduce(summed, op=dist.ReduceOp.SUM)
        world_size = dist.get_world_size()
        epoch_loss = summed.item() / world_size
        log0(
            f"epoch {epoch} | world size {world_size} | batch size {batch_size} per rank "
            f"| steps {steps} | loss {epoch_loss:.6f}"
        )

    def _save_snapshot(self, epoch: int) -> None:
        snapshot = {
            # model.module is the model DDP wraps: plain names ("weight"), loadable
            # without DDP and before the wrap.
            "model": self.model.module.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            # The number of epochs *finished*, so a resume starts at the next one.
            "epochs_run": epoch + 1,
            # Every rank drew the same random numbers so far: rank 0's state is theirs.
            "rng_state": torch.get_rng_state(),
        }
        # Temporary file, fsync, rename: a crash mid-write leaves the previous snapshot.
        save_atomic(snapshot, self.snapshot_path)
        log(f"epoch {epoch} | snapshot saved to {self.snapshot_path.resolve()}")

    def train(self, max_epochs: int) -> None:
        for epoch in range(self.epochs_run, max_epochs):
            self._run_epoch(epoch)
            # After every save_every-th epoch, and after the last one, so the file
            # always ends up holding the trained model.
            if (epoch + 1) % self.save_every == 0 or epoch + 1 == max_epochs:
                # Every replica holds the same weights, so one copy per folder is
                # enough. No collective (all_reduce, barrier, a DDP forward) may sit
                # inside this branch: the savers would wait for ranks that never enter.
                if self.saves_snapshot:
                    self._save_snapshot(epoch)
        log0(f"training finished: {max_epochs} epochs")


class ResumeMismatch(SnapshotError):
    """The ranks resumed from different epochs."""


def snapshot_folder_is_shared(snapshot_path: Path, device: torch.device) -> bool:
    """True when every process sees the same snapshot folder: one filesystem shared by
    all nodes (or a single node). Rank 0 writes a random token there, every process
    reads it back; it is shared only if every process read the token."""
    folder = snapshot_path.parent
    folder.mkdir(parents=True, exist_ok=True)
    probe = folder / f".{snapshot_path.name}.shared"
    # os.urandom, not torch: the training's random state must not move.
    token = torch.tensor([int.from_bytes(os.urandom(7), "big")], device=device)
    dist.broadcast(token, src=0)
    if dist.get_rank() == 0:
        probe.write_text(str(token.item()))
    dist.barrier()
    try:
        seen = probe.read_text() == str(token.item())
    except OSError:
        seen = False
    everyone = torch.tensor([int(seen)], device=device)
    dist.all_reduce(everyone, op=dist.ReduceOp.MIN)  # shared only if all saw it
    if dist.get_rank() == 0:
        probe.unlink()
    return bool(everyone.item())


def load_train_objs() -> tuple[Dataset, torch.nn.Module, torch.optim.Optimizer]:
    train_set = SyntheticRegression(size=2048)
    model = regression_model(seed=0)
    # Momentum gives the optimizer a state of its own (a running average of the
    # gradients): a resume that dropped it would not continue the same training.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return train_set, model, optimizer


def prepare_dataloader(dataset: Dataset, batch_size: int) -> DataLoader:
    # Each rank gets a different 1/world_size of every epoch's shuffled indices.
    sampler = DistributedSampler(dataset, shuffle=True, seed=SHUFFLE_SEED)
    return DataLoader(
        dataset, batch_size=batch_size, sampler=sampler, pin_memory=torch.cuda.is_available()
    )


# Whatever a worker raises, @record writes it to a file that torchrun reads, so
# torchrun's failure report shows the worker's own error as the root cause.
@record
def main(
    total_epochs: int,
    save_every: int,
    batch_size: int,
    snapshot_path: Path,
    crash_at: tuple[int, int, int] | None,
) -> None:
    device = ddp_setup()
    dataset, model, optimizer = load_train_objs()
    train_data = prepare_dataloader(dataset, batch_size)
    check_crash_plan(crash_at, total_epochs, len(train_data))
    try:
        trainer = Trainer(model, train_data, optimizer, device, save_every, snapshot_path, crash_at)
    except ResumeMismatch as error:
        log0(str(error))  # the same on every rank: say it once
        dist.destroy_process_group()
        raise SystemExit(1) from None
    except SnapshotError as error:
        log(str(error))  # one line that names the file and what to do, not a traceback
        dist.destroy_process_group()
        raise SystemExit(1) from None
    trainer.train(total_epochs)
    dist.destroy_process_group()


def check_crash_plan(crash_at: tuple[int, int, int] | None, epochs: int, steps: int) -> None:
    """A crash that can never happen would let a demonstration pass for the wrong reason."""
    if crash_at is None:
        return
    rank, epoch, step = crash_at
    for name, value, limit in (
        ("--crash_rank", rank, dist.get_world_size()),
        ("--crash_epoch", epoch, epochs),
        ("--crash_step", step, steps),
    ):
        if value >= limit:
            log0(f"{name} {value} never happens: it must be below {limit}; launch it as: {LAUNCH}")
            dist.destroy_process_group()
            raise SystemExit(2)


def natural_int(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 0")
    return int(text)


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
    crash = parser.add_argument_group("failure injection (once per job: not after a restart)")
    crash.add_argument("--crash_epoch", type=natural_int, help="epoch at which a worker dies")
    crash.add_argument("--crash_step", type=natural_int, default=0, help="step of that epoch")
    crash.add_argument("--crash_rank", type=natural_int, default=0, help="global rank that dies")
    args = parser.parse_args()
    crash_at = None
    if args.crash_epoch is not None:
        crash_at = (args.crash_rank, args.crash_epoch, args.crash_step)
    main(args.total_epochs, args.save_every, args.batch_size, args.snapshot_path, crash_at)
    end_process()  # not Python's teardown: see common.distributed.end_process
