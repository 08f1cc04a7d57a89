"""Lesson 04: the same training on several machines ("nodes").

Lesson 03's `multigpu_preemptible.py` made ready for more than one node: local rank 0
of every node saves a snapshot, and at start-up all ranks agree on the newest one that
any rank sees (`snapshot_placement.py` says why: nodes may or may not share a folder).

Launch it (from any folder, with the path to this file):

    torchrun --nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d \\
        --rdzv_endpoint=HEAD:PORT --rdzv_id=job42 multinode.py 50 10

on each node (HEAD: the first node's address, PORT a port free there; on one machine,
two agents in two terminals, 127.0.0.1), or `sbatch slurm/multinode.sbatch 50 10`.
Options: `--help`. It saves to, and resumes from, `snapshot.pt` in the current folder.
"""

import os
import socket
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from snapshot_placement import Resume, newest_snapshot
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
from common.preemption import RESUMABLE_EXIT_CODE, StopRequest, stop_the_agent
from common.random_state import RandomState, gather_random_states, restore_random_state
from common.snapshot import SnapshotError, save_atomic

LAUNCH = (
    "torchrun --nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d "
    "--rdzv_endpoint=HEAD:PORT --rdzv_id=job42 multinode.py 50 10"
)
SNAPSHOT_KEYS = ("model", "optimizer", "epochs_run", "steps_run", "loss_so_far", "rng_state")
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
    node_rank = os.environ.get("GROUP_RANK", "0")  # torchrun numbers the nodes too
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
        stop: StopRequest,
    ) -> None:
        self.device = device
        self.global_rank = dist.get_rank()
        self.model = model.to(device)
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.snapshot_path = snapshot_path
        self.stop = stop  # notes SIGTERM and SIGUSR1
        self.epochs_run = 0  # epochs finished
        self.steps_run = 0  # and steps of the next one, after a stop in its middle
        self.loss_so_far = 0.0  # that epoch's loss until the stop, summed over the ranks
        # One writer per node: its local rank 0 (on a shared folder, all write alike).
        self.saves_snapshot = int(os.environ["LOCAL_RANK"]) == 0
        # Before the DDP wrap, on every rank: all agree on the newest snapshot any sees.
        resume = newest_snapshot(snapshot_path, SNAPSHOT_KEYS, device)
        if resume is not None:
            self._load_snapshot(resume)
        # DDP: broadcasts rank 0's weights to every rank, then averages the gradients of
        # every backward pass. device_ids names the one device this replica lives on.
        self.model = DDP(self.model, device_ids=[device.index] if device.type == "cuda" else None)

    def _load_snapshot(self, resume: Resume) -> None:
        # The same state on every rank, on the CPU: load_state_dict moves it to the device.
        snapshot = resume.state
        self.model.load_state_dict(snapshot["model"])
        self.optimizer.load_state_dict(snapshot["optimizer"])  # momentum buffers
        # Each rank's own generators (CPU, and its GPU's), as it left them.
        notice = restore_random_state(snapshot["rng_state"], self.device)
        if notice:
            log0(notice)
        self.epochs_run = snapshot["epochs_run"]
        self.steps_run = snapshot["steps_run"]
        self.loss_so_far = snapshot["loss_so_far"]
        log(
            f"resumed from rank {resume.rank}'s {self.snapshot_path} (node {resume.node}): "
            f"{self.epochs_run} epochs done, continuing at epoch {self.epochs_run} "
            f"step {self.steps_run}"
        )

    def _run_batch(self, source: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad()
        output = self.model(source)
        loss = F.mse_loss(output, targets)
        loss.backward()  # DDP averages the gradients over the ranks as they are computed
        self.optimizer.step()
        return loss.detach()  # not .item(): on a GPU that would wait for every step

    def _all_ranks_agree_to_stop(self) -> bool:
        # Ranks receive a signal at different moments (or only some do): one that stopped
        # alone would leave the others waiting in the next all-reduce. So at every step
        # all share their flag (MAX: 1 if any rank was asked). On a GPU, .item() is a host
        # sync per step (what the loss's .detach() avoids); asked every N steps it costs
        # 1/N of that, and the stop comes up to N steps later (within Slurm's KillWait).
        flag = torch.tensor([int(self.stop.received)], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())  # the same answer on every rank, at the same step

    def _run_epoch(self, epoch: int) -> bool:
        # The sampler shuffles with seed + epoch: without set_epoch every epoch would
        # repeat the order of epoch 0.
        self.train_data.sampler.set_epoch(epoch)  # DDP
        total_loss = torch.zeros((), dtype=torch.float64, device=self.device)
        # After a stop in this epoch, its first steps ran: skip them (the order depends
        # only on the seed and the epoch), and rank 0 carries their summed loss.
        first_step = self.steps_run if epoch == self.epochs_run else 0
        if first_step and self.global_rank == 0:
            total_loss += self.loss_so_far
        for step, (source, targets) in enumerate(self.train_data):
            if step < first_step:
                continue  # loaded, not trained
            if self._all_ranks_agree_to_stop():
                self._stop_at(epoch, step, total_loss)
                return True  # asked to stop: a snapshot holds where
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
        return False

    def _stop_at(self, epoch: int, step: int, total_loss: torch.Tensor) -> None:
        """Every rank, at the same step: save what this step needs, then leave."""
        signal_name = self.stop.signal_name or "none (another rank did)"
        log(f"epoch {epoch} | stop agreed before step {step} | signal here: {signal_name}")
        dist.all_reduce(total_loss, op=dist.ReduceOp.SUM)  # the resumed epoch adds the rest
        random_states = gather_random_states(self.device)  # a collective: every rank
        if self.saves_snapshot:
            self._save_snapshot(epoch, random_states, step, total_loss.item())
        dist.barrier()  # no rank exits before the snapshot is saved: torchrun would stop all

    def _save_snapshot(
        self, epochs_run: int, random_states: list[RandomState], steps_run=0, loss_so_far=0.0
    ) -> None:
        snapshot = {
            # model.module is the model DDP wraps: plain names ("weight"), loadable
            # without DDP and before the wrap.
            "model": self.model.module.state_dict(),  # DDP
            "optimizer": self.optimizer.state_dict(),
            # The epochs *finished*: a resume starts at the first epoch not trained.
            "epochs_run": epochs_run,
            "steps_run": steps_run,  # and steps of the next one, after a stop in its middle
            "loss_so_far": loss_so_far,  # their loss, summed over the ranks
            "rng_state": random_states,  # every rank's random generators, in rank order
        }
        # Temporary file, fsync, rename: a crash mid-write leaves the previous snapshot.
        save_atomic(snapshot, self.snapshot_path)
        # Step 0 of an epoch is the end of the one before: said as at an epoch's end.
        done = f"epoch {epochs_run} step {steps_run}"
        if steps_run == 0:  # (a stop before the first step saves the untrained model)
            done = f"epoch {epochs_run - 1}" if epochs_run else "before the first step"
        log(f"{done} | snapshot saved to {self.snapshot_path.resolve()}")

    def train(self, max_epochs: int) -> bool:
        for epoch in range(self.epochs_run, max_epochs):
            if self._run_epoch(epoch):
                return False
            # After every save_every-th epoch, and after the last one, so the file
            # always ends up holding the trained model.
            if (epoch + 1) % self.save_every == 0 or epoch + 1 == max_epochs:
                # The random generators are each rank's own: gather them. A collective,
                # so every rank calls it, here, outside the branch below.
                random_states = gather_random_states(self.device)
                # Every replica holds the same weights, so one writer is enough. No
                # collective (all_reduce, barrier, a DDP forward) may sit inside this
                # branch: the writer would wait in it for ranks that never enter it.
                if self.saves_snapshot:  # DDP
                    self._save_snapshot(epoch + 1, random_states)
        log0(f"training finished: {max_epochs} epochs")
        return True


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
    stop = StopRequest()  # first: a stop asked for while the job starts is then noted
    device = ddp_setup()
    dataset, model, optimizer = load_train_objs()
    train_data = prepare_dataloader(dataset, batch_size, device)
    try:
        trainer = Trainer(model, train_data, optimizer, device, save_every, snapshot_path, stop)
    except SnapshotError as error:
        log0(str(error))  # one line, the same on every rank (they agreed on it): said once
        stop_the_agent()  # every restart would meet the same file: ask torchrun to stop
        dist.barrier()  # the agent has been asked before any worker exits
        dist.destroy_process_group()
        return 1
    finished = trainer.train(total_epochs)
    dist.destroy_process_group()  # DDP
    return 0 if finished else RESUMABLE_EXIT_CODE  # 75: stopped, resume me


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
