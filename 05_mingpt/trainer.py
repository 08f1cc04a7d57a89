"""Lesson 05: the trainer of a real project, grown from lesson 03's.

Used by `main.py` (see its docstring for the commands that launch the lesson).

What it adds to lesson 03's: a global batch whatever the number of processes
(micro-batches, DDP all-reducing on the last); validation averaged over ranks; a
learning-rate schedule; mixed precision (precision.py); snapshots of everything a
step depends on (snapshots.py), resumed only when nothing can go silently wrong
(resume.py); a stop at the current step when the cluster asks (SIGTERM, lesson 03);
progress lines with tokens/s and MFU (efficiency.py); and a metrics file.
"""

import math
from contextlib import nullcontext
from itertools import islice
from pathlib import Path

import torch
import torch.distributed as dist
from config import Config, shaping_settings
from efficiency import model_flops_per_token, peak_flops
from interval import Interval, metrics_line
from precision import precision_and_scaler
from resume import check_ranks_agree, keep_metrics_up_to, read_snapshot, resumed_schedule
from schedule import count_steps, learning_rate, micro_batching, small_micro_batches
from snapshots import SnapshotFiles
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from common.crash_injection import die_now
from common.distributed import log, log0
from common.preemption import StopRequest
from common.random_state import gather_random_states, restore_random_state
from common.snapshot import SnapshotError


class Trainer:
    def __init__(self, config: Config, model, optimizer, vocabulary, train_set, val_set,
                 device, local_rank: int, global_rank: int, world_size: int,
                 crash_at=None, resume_with_new_config=False,
                 stop: StopRequest | None = None):  # fmt: skip
        self.config, self.settings = config, config.trainer
        self.device, self.global_rank, self.world_size = device, global_rank, world_size
        self.vocabulary, self.train_set = vocabulary, train_set
        self.crash_at = crash_at  # (rank, epoch, step) counted from 0, or None
        self.stop = stop  # notes SIGTERM/SIGUSR1; None: a signal kills the process
        self.raw_model, self.optimizer = model.to(device), optimizer
        self._plan_the_steps()  # the global batch's split, and how many steps
        self._make_loaders(train_set, val_set)
        state = self._start_or_resume(resume_with_new_config)  # None: a fresh run
        self._choose_the_precision(state, resume_with_new_config)
        if global_rank == 0:  # a fresh run starts an empty file
            keep_metrics_up_to(self.metrics_path, self.step if state else None)
        # torch.compile before the DDP wrap: DDP then calls the compiled module.
        compiled = torch.compile(self.raw_model) if config.trainer.compile else self.raw_model
        self.model = DDP(compiled, device_ids=[local_rank] if device.type == "cuda" else None)
        log0(
            f"global batch {config.trainer.global_batch_size} = {world_size} process(es) x "
            f"{self.micro_batches} micro-batch(es) x {self.batch_size} sequences; "
            f"{self.steps_per_epoch} steps per epoch; precision {self.precision.why}"
        )
        if note := small_micro_batches(config, world_size):
            log0(note)

    def _plan_the_steps(self) -> None:
        config, steps = self.config, count_steps(self.config, len(self.train_set))
        self.batch_size, self.micro_batches = micro_batching(config, self.world_size)
        self.steps_per_epoch, self.total_steps, self.decay_steps = steps
        self.tokens_per_step = config.trainer.global_batch_size * self.train_set.block_size
        self.settings_saved = {**shaping_settings(config), "steps_per_epoch": self.steps_per_epoch}

    def _choose_the_precision(self, state: dict | None, accept_changes: bool) -> None:
        """bf16, fp16 or float32 (a resume keeps its run's), and the MFU's peak for it."""
        self.precision, self.scaler, notice = precision_and_scaler(
            self.settings.amp, self.device, self.raw_model, self.train_loader, state,
            accept_changes, self.files.latest,
        )  # fmt: skip
        if notice:
            log0(notice)
        self.flops_per_token = model_flops_per_token(self.raw_model, self.train_set.block_size)
        peak = self.settings.peak_tflops * 1e12 or peak_flops(self.device, self.precision.dtype)
        self.peak_flops = peak * self.world_size  # MFU: of every process's device together

    def _make_loaders(self, train_set, val_set) -> None:
        # The training windows are random already (char_dataset.py): the sampler does not shuffle,
        # it deals each rank its share of every global batch. Validation: every rank a strided share
        # of the windows, each window once. Each loader draws its epoch seed from a generator of its
        # own, not from the global one, whose stream (dropout) a resume must replay exactly. Pinned
        # memory lets the copies to a GPU run without blocking (`non_blocking=True` below).
        self.train_sampler = DistributedSampler(train_set, shuffle=False, drop_last=True)
        loader = {"pin_memory": self.device.type == "cuda", "generator": torch.Generator()}
        self.train_loader = DataLoader(
            train_set, self.batch_size, sampler=self.train_sampler, drop_last=True, **loader
        )
        val_share = range(self.global_rank, len(val_set), self.world_size)
        self.val_loader = DataLoader(val_set, self.batch_size, sampler=val_share, **loader)

    def _start_or_resume(self, accept_changes: bool) -> dict | None:
        """A fresh run's files and counters, then the snapshot if any, loaded before the
        DDP wrap (which broadcasts rank 0's weights); every rank agrees on it or stops."""
        where = self.settings  # snapshot_path, keep_snapshots, metrics_path
        self.files = SnapshotFiles(where.snapshot_path, where.keep_snapshots, self.global_rank)
        self.metrics_path = Path(where.metrics_path)
        self.step, self.train_seconds, self.best_val_loss = 0, 0.0, math.inf
        state, error = None, None
        try:
            state, notices = read_snapshot(
                self.files.latest, self.device, self.raw_model, self.optimizer,
                self.vocabulary.chars, self.settings_saved, accept_changes,
            )  # fmt: skip
        except SnapshotError as problem:
            error = str(problem)
        check_ranks_agree(state["step"] if state else 0, error, self.global_rank, self.files.latest)
        if state is None:
            return None
        self.step, self.train_seconds = state["step"], state["seconds"]
        self.best_val_loss = state["best_val_loss"]
        self.decay_steps, notice = resumed_schedule(state, self.decay_steps, self.config)
        notices += [notice, restore_random_state(state["rng"], self.device)]
        for notice in filter(None, notices):
            log0(notice)
        epochs = self.step // self.steps_per_epoch
        log(f"resuming from snapshot {self.files.latest}: {epochs} epochs, {self.step} steps done")
        return state

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
            with nullcontext() if last else self.model.no_sync():
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
        dist.all_reduce(totals)
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
        if self.step and val_loss < self.best_val_loss:  # so every rank takes this branch
            self.best_val_loss = val_loss
            self.files.save_best(self._snapshot_state(), self.step, val_loss)

    def _all_ranks_agree_to_stop(self) -> bool:
        # As in lesson 03: ranks hear a signal at different moments (or only some do),
        # so at every step they share their flag; MAX is 1 if any rank was asked. On a
        # GPU, .item() makes this a host sync every step: interval.py says what it costs.
        flag = torch.tensor([int(self.stop.received)], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
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
                self.files.save(self._snapshot_state(), self.step)
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
        self.train_set.set_epoch(epoch)  # this epoch's window offsets, on every rank alike
        # A resumed epoch reads and drops the micro-batches its first steps took (main.py).
        batches = islice(self.train_loader, first * self.micro_batches, None)
        last = min(self.steps_per_epoch, first + self.total_steps - self.step)
        self.interval = Interval(self.device)
        for step_in_epoch in range(first, last):
            if self.stop is not None and self._all_ranks_agree_to_stop():
                self.train_seconds += self.interval.seconds()
                heard = self.stop.signal_name or "none (another rank did)"
                log(f"stop agreed at step {self.step} | signal here: {heard}")
                self.files.save(self._snapshot_state(), self.step)
                return False
            self._crash_if_planned(epoch, step_in_epoch)
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
                    self.files.save(self._snapshot_state(), self.step)
        self.train_seconds += self.interval.seconds()
        return True

    def _crash_if_planned(self, epoch: int, step_in_epoch: int) -> None:
        # main() clears crash_at after a restart, so the restarted group gets past here.
        if self.crash_at == (self.global_rank, epoch, step_in_epoch):
            die_now(epoch, step_in_epoch)  # SIGKILL, like the out-of-memory killer

    def _progress(self, epoch: int) -> None:
        """Rank 0 prints the training loss averaged over ranks, the learning rate, the
        gradient norm, the speed, the MFU and the time left."""
        mean_loss, grad_norm, skipped = self.interval.summary(self.world_size)  # all ranks
        steps, seconds = self.interval.steps, self.interval.seconds()
        self.train_seconds += seconds
        lr = self.optimizer.param_groups[0]["lr"]  # that of the interval's last step
        tokens_per_second = steps * self.tokens_per_step / seconds
        mfu = tokens_per_second * self.flops_per_token / self.peak_flops
        left = (self.total_steps - self.step) * seconds / steps
        skipped = f" ({skipped} skipped: fp16 overflow)" if skipped else ""
        log0(
            f"epoch {epoch + 1}/{self.settings.max_epochs} step {self.step}/{self.total_steps} "
            f"loss {mean_loss:.4f} | lr {lr:.2e} | grad norm {grad_norm:.3f}{skipped} | "
            f"{tokens_per_second:,.0f} tokens/s | MFU {mfu:.1%} | {left:.0f} s left"
        )
        self._record(kind="train", step=self.step, epoch=epoch, loss=mean_loss, lr=lr,
                     grad_norm=grad_norm, tokens_per_second=tokens_per_second, mfu=mfu,
                     seconds=self.train_seconds)  # fmt: skip
        self.interval = Interval(self.device)

    def _snapshot_state(self) -> dict | None:
        """What a resume needs, on rank 0; None on the others. Every rank's random
        stream (dropout) is its own: gathering them is a collective, so every rank
        calls this; only the writing is rank 0's alone."""
        rng = gather_random_states(self.device)
        if self.global_rank != 0:
            return None
        return {
            "model": self.raw_model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),  # empty unless fp16
            "precision": self.precision.name,  # what auto chose: a resume keeps it
            "step": self.step,
            "epochs_run": self.step // self.steps_per_epoch,
            "decay_steps": self.decay_steps,
            "best_val_loss": self.best_val_loss,
            "rng": rng,
            "chars": self.vocabulary.chars,
            "settings": self.settings_saved,
            "seconds": self.train_seconds,
        }
