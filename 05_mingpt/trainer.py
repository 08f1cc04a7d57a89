"""Lesson 05: the trainer of a real project, grown from lesson 03's.

Used by `main.py` (see its docstring for the commands that launch the lesson).

What it adds to lesson 03's: a global batch whatever the number of processes
(micro-batches, DDP all-reducing on the last); validation averaged over ranks; a
learning-rate schedule (schedule.py); mixed precision (precision.py); snapshots of
everything a step depends on, resumed as lesson 04 resumes (snapshots.py); a stop at
the current step when the cluster asks (SIGTERM, lesson 03); progress lines with the
tokens per second; and a metrics file. `grep "# DDP"` lists the lines that make it
distributed.
"""

import math
from contextlib import nullcontext
from itertools import islice
from pathlib import Path

import torch
import torch.distributed as dist
from char_dataset import TextData
from config import Config, shaping_settings
from interval import Interval, metrics_line
from precision import choose_precision
from schedule import count_steps, learning_rate, micro_batching
from snapshots import check_snapshot, keep_metrics_up_to, newest_snapshot
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from common.distributed import log, log0
from common.preemption import StopRequest
from common.random_state import gather_random_states, restore_random_state
from common.snapshot import save_atomic


class Trainer:
    def __init__(self, config: Config, model, optimizer, data: TextData, device: torch.device,
                 stop: StopRequest | None = None):  # fmt: skip
        self.config, self.settings, self.data, self.device = config, config.trainer, data, device
        self.raw_model, self.optimizer = model.to(device), optimizer
        self.stop = stop  # notes SIGTERM/SIGUSR1; None: a signal kills the process
        self.global_rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.batch_size, self.micro_batches = micro_batching(config, self.world_size)
        self.steps_per_epoch, self.total_steps = count_steps(config, len(data.train_set))
        self.decay_steps = self.settings.max_epochs * self.steps_per_epoch  # the schedule's end
        self.tokens_per_step = self.settings.global_batch_size * data.train_set.block_size
        self.precision = choose_precision(self.settings.amp.name, device)
        # fp16 needs loss scaling (precision.py); for bf16 and float32 the scaler is
        # disabled and passes everything through, so the same code runs everywhere.
        fp16 = self.precision.dtype == torch.float16
        self.scaler = torch.amp.GradScaler(device.type, enabled=fp16)
        self.settings_saved = {**shaping_settings(config), "trainer.amp": self.precision.name,
                               "steps_per_epoch": self.steps_per_epoch}  # fmt: skip
        self._make_loaders()
        self.snapshot_path = Path(self.settings.snapshot_path)
        self.metrics_path = Path(self.settings.metrics_path)
        self.step, self.train_seconds = 0, 0.0
        # Before the DDP wrap: every replica resumes from the same snapshot (snapshots.py).
        state = newest_snapshot(self.snapshot_path, device)
        if state is not None:
            self._resume(state)
        if self.global_rank == 0:  # a fresh run starts an empty file
            keep_metrics_up_to(self.metrics_path, self.step if state else None)
        # torch.compile before the DDP wrap: DDP then calls the compiled module.
        compiled = torch.compile(self.raw_model) if self.settings.compile else self.raw_model
        # Broadcasts rank 0's weights to every rank, then averages the gradients of
        # every backward pass. device_ids names the one device this replica lives on.
        device_ids = [device.index] if device.type == "cuda" else None
        self.model = DDP(compiled, device_ids=device_ids)  # DDP:
        log0(
            f"global batch {self.settings.global_batch_size} = {self.world_size} process(es) x "
            f"{self.micro_batches} micro-batch(es) x {self.batch_size} sequences; "
            f"{self.steps_per_epoch} steps per epoch; precision {self.precision.why}"
        )

    def _make_loaders(self) -> None:
        train_set, val_set = self.data.train_set, self.data.val_set
        # The training windows are random already (char_dataset.py): the sampler does not
        # shuffle, it deals each rank its share of every global batch.
        self.train_sampler = DistributedSampler(train_set, shuffle=False, drop_last=True)  # DDP:
        # Each loader draws its epoch seed from a generator of its own, not from the global
        # one, whose stream (dropout) a resume must replay exactly. Pinned memory lets the
        # copies to a GPU run without blocking (`non_blocking=True` below).
        loader = {"pin_memory": self.device.type == "cuda", "generator": torch.Generator()}
        self.train_loader = DataLoader(
            train_set, self.batch_size, sampler=self.train_sampler, drop_last=True, **loader
        )
        # Validation: every rank a strided share of the windows, each window once (a
        # DistributedSampler would pad the last shares with windows counted twice).
        val_share = range(self.global_rank, len(val_set), self.world_size)  # DDP:
        self.val_loader = DataLoader(val_set, self.batch_size, sampler=val_share, **loader)

    def _resume(self, state: dict) -> None:
        check_snapshot(state, self.data.vocabulary.chars, self.settings_saved, self.snapshot_path)
        # The same state on every rank, on the CPU: load_state_dict copies the tensors
        # to *this* process's device (the optimizer's state to its parameters' device).
        self.raw_model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])  # Adam's moments
        self.scaler.load_state_dict(state["scaler"])  # fp16: the scale (else nothing)
        self.step, self.train_seconds = state["step"], state["seconds"]
        # Each rank's own generators (CPU, and its GPU's), as it left them: dropout.
        notice = restore_random_state(state["rng"], self.device)
        if notice:
            log0(notice)
        epochs = self.step // self.steps_per_epoch
        log(f"resuming from snapshot {self.snapshot_path}: {epochs} epochs, {self.step} steps done")

    @property
    def finished(self) -> bool:
        return self.step >= self.total_steps

    def _run_step(self, micro_batches) -> tuple[torch.Tensor, torch.Tensor]:
        """One optimizer step on this process's micro-batches: (loss, gradient norm)."""
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(self.config.optimizer, self.step, self.decay_steps)
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = torch.zeros((), device=self.device)
        for index, (inputs, targets) in enumerate(micro_batches):
            inputs = inputs.to(self.device, non_blocking=True)  # from pinned memory
            targets = targets.to(self.device, non_blocking=True)
            # DDP all-reduces during backward(). Before the last micro-batch it must not:
            # under no_sync (forward and backward) the gradients only add up locally,
            # and the last backward all-reduces their sum: one round of buckets a step.
            last = index == len(micro_batches) - 1
            with nullcontext() if last else self.model.no_sync():  # DDP:
                with self.precision.autocast(self.device):
                    _, loss = self.model(inputs, targets)
                # Each loss is a mean over its micro-batch: dividing by their number
                # makes the sum a mean over this process's share, and DDP's average
                # over ranks makes it the mean over the global batch.
                loss = loss / len(micro_batches)
                self.scaler.scale(loss).backward()
            loss_sum += loss.detach()
        # Clip the true gradients: while scaled (fp16) they are the scale times too large,
        # and a clip on them would cut every step (the official series does that).
        self.scaler.unscale_(self.optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(
            self.model.parameters(), self.config.optimizer.grad_clip or math.inf
        )  # returns the norm before clipping; with grad_clip=0 it only measures it
        self.scaler.step(self.optimizer)  # skips the step if fp16 overflowed to inf/nan
        self.scaler.update()
        return loss_sum, grad_norm

    @torch.no_grad()
    def evaluate(self) -> float:
        """The mean validation loss over all ranks' shards (every rank must call it)."""
        self.raw_model.eval()
        totals = torch.zeros(2, device=self.device)  # (sum of losses, number of windows)
        for inputs, targets in self.val_loader:
            inputs = inputs.to(self.device, non_blocking=True)
            targets = targets.to(self.device, non_blocking=True)
            with self.precision.autocast(self.device):
                _, loss = self.raw_model(inputs, targets)
            totals[0] += loss.float() * len(inputs)
            totals[1] += len(inputs)
        self.raw_model.train()
        dist.all_reduce(totals)  # DDP: every rank's sums, so every rank's mean is the whole set's
        return (totals[0] / totals[1]).item()

    def _record(self, **metrics) -> None:
        if self.global_rank == 0:
            with open(self.metrics_path, "a") as file:
                file.write(metrics_line(metrics) + "\n")

    def _validate_and_record(self, where: str) -> None:
        val_loss = self.evaluate()  # the same number on every rank
        log0(f"{where} step {self.step}/{self.total_steps} validation loss {val_loss:.4f}")
        self._record(kind="val", step=self.step, epoch=self.step // self.steps_per_epoch,
                     loss=val_loss, seconds=self.train_seconds)  # fmt: skip

    def _all_ranks_agree_to_stop(self) -> bool:
        # As in lesson 03: ranks hear a signal at different moments (or only some do),
        # so at every step they share their flag; MAX is 1 if any rank was asked. On a
        # GPU, .item() waits for the step to finish before the next can be queued (a
        # host sync per step); asked every N steps, it costs 1/N of that, and the stop
        # comes up to N steps later: those steps and the save must fit in Slurm's KillWait.
        flag = torch.tensor([int(self.stop.received)], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # DDP:
        return bool(flag.item())

    def train(self) -> bool:
        """Train to the end (True), or until the ranks agree to stop (False)."""
        steps_before, seconds_before = self.step, self.train_seconds
        if self.step == 0:
            self._validate_and_record("start:")  # about ln(vocabulary): a uniform guess
        while not self.finished:
            epoch, first = divmod(self.step, self.steps_per_epoch)
            if not self._train_epoch(epoch, first):
                return False
            epochs = f"epoch {epoch + 1}/{self.settings.max_epochs}"
            at_end = self.step % self.steps_per_epoch == 0
            self._validate_and_record(f"end of {epochs}:" if at_end else "trainer.max_steps:")
            if not at_end or self.finished or (epoch + 1) % self.settings.save_every == 0:
                self._save_snapshot()
        steps, seconds = self.step - steps_before, self.train_seconds - seconds_before
        if steps:
            log0(
                f"trained {steps} steps in {seconds:.1f} s: "
                f"{steps * self.tokens_per_step / seconds:,.0f} tokens/s over "
                f"{self.world_size} process(es)"
            )
        return True

    def _train_epoch(self, epoch: int, first: int) -> bool:
        """Steps `first`, ... of `epoch`, up to its end or trainer.max_steps; False if
        the ranks agreed to stop (the snapshot of the current step is then saved)."""
        self.data.train_set.set_epoch(epoch)  # DDP: this epoch's windows, alike on every rank
        # A resumed epoch draws its batches from the start and drops those its first
        # steps took (the sampler cannot start mid-epoch): no forward or backward pass
        # for them, but each is read and collated, which costs next to nothing for this
        # text and up to an epoch's loading for data decoded or read from disk.
        batches = islice(self.train_loader, first * self.micro_batches, None)
        last = min(self.steps_per_epoch, first + self.total_steps - self.step)
        self.interval = Interval(self.device)
        for step_in_epoch in range(first, last):
            if self.stop is not None and self._all_ranks_agree_to_stop():
                self.train_seconds += self.interval.seconds()
                heard = self.stop.signal_name or "none (another rank did)"
                log(f"stop agreed at step {self.step} | signal here: {heard}")
                self._save_snapshot()
                return False
            loss, grad_norm = self._run_step([next(batches) for _ in range(self.micro_batches)])
            self.step += 1
            self.interval.add(loss, grad_norm)
            if self.step % self.settings.log_every == 0 or self.step == self.total_steps:
                self._progress(epoch)
            if self.step % self.settings.eval_every == 0 and step_in_epoch + 1 < last:
                with self.interval.paused():  # tokens/s counts training time only
                    self._validate_and_record(f"epoch {epoch + 1}/{self.settings.max_epochs}")
            every = self.settings.save_every_steps
            if every and self.step % every == 0 and step_in_epoch + 1 < last:
                with self.interval.paused():
                    self._save_snapshot()
        self.train_seconds += self.interval.seconds()
        return True

    def _progress(self, epoch: int) -> None:
        """Rank 0 prints the training loss averaged over ranks, the learning rate, the
        gradient norm, the speed and the time left."""
        mean_loss, grad_norm, skipped = self.interval.summary(self.world_size)  # all ranks
        steps, seconds = self.interval.steps, self.interval.seconds()
        self.train_seconds += seconds
        lr = self.optimizer.param_groups[0]["lr"]  # that of the interval's last step
        tokens_per_second = steps * self.tokens_per_step / seconds
        left = (self.total_steps - self.step) * seconds / steps
        skipped = f" ({skipped} skipped: fp16 overflow)" if skipped else ""
        log0(
            f"epoch {epoch + 1}/{self.settings.max_epochs} step {self.step}/{self.total_steps} "
            f"loss {mean_loss:.4f} | lr {lr:.2e} | grad norm {grad_norm:.3f}{skipped} | "
            f"{tokens_per_second:,.0f} tokens/s | {left:.0f} s left"
        )
        self._record(kind="train", step=self.step, epoch=epoch, loss=mean_loss, lr=lr,
                     grad_norm=grad_norm, tokens_per_second=tokens_per_second,
                     seconds=self.train_seconds)  # fmt: skip
        self.interval = Interval(self.device)

    def _save_snapshot(self) -> None:
        """Everything the next step depends on, written by global rank 0. Every rank's
        random stream (dropout) is its own: gathering them is a collective, so every
        rank calls this; only the writing is rank 0's alone."""
        rng = gather_random_states(self.device)
        # Every replica holds the same weights: one writer is enough. No collective may
        # sit inside this branch: rank 0 would wait for ranks that never enter it.
        if self.global_rank != 0:  # DDP:
            return
        state = {
            "model": self.raw_model.state_dict(),  # not DDP's: no "module." in the names
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),  # empty unless fp16
            "step": self.step,
            "epochs_run": self.step // self.steps_per_epoch,
            "rng": rng,
            "chars": self.data.vocabulary.chars,
            "settings": self.settings_saved,
            "seconds": self.train_seconds,
        }
        save_atomic(state, self.snapshot_path)  # a temporary file, then a rename
        log(f"step {self.step}: snapshot saved to {self.snapshot_path}")
