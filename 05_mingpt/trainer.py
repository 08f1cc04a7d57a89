"""Lesson 05: the trainer of a real project, grown from lesson 03's.

Used by `main.py` (see its docstring for the commands that launch the lesson).

What it adds to lesson 03's trainer: a sampler for the validation set too, and a
validation loss averaged over ranks; a learning-rate schedule; mixed precision
(bf16 autocast on CPU, fp16 with a GradScaler on CUDA) with the gradients clipped
*after* they are unscaled; a snapshot that also holds the scaler, the step and every
rank's random state; a progress line with tokens per second and time left; a metrics
file for plotting; and a text sample at the end.
"""

import json
import math
import os
import signal
import time
from pathlib import Path

import torch
import torch.distributed as dist
from config import Config
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from common.distributed import log, log0
from common.random_state import gather_random_states, restore_random_state
from common.snapshot import SnapshotError, load, save_atomic

SNAPSHOT_KEYS = ("model", "optimizer", "scaler", "epochs_run", "step", "rng", "chars")


class Trainer:
    def __init__(
        self,
        config: Config,
        model,
        optimizer,
        dataset,
        train_set,
        val_set,
        device,
        local_rank: int,
        global_rank: int,
        world_size: int,
        crash_at=None,
    ):
        self.config, self.settings = config, config.trainer
        self.device, self.global_rank, self.world_size = device, global_rank, world_size
        self.dataset = dataset
        self.crash_at = crash_at  # (rank, epoch, step) counted from 0, or None
        self.model = model.to(device)
        self.optimizer = optimizer
        # fp16 needs loss scaling (small gradients underflow to 0); bf16 has float32's
        # range and does not. A disabled scaler passes everything through unchanged.
        self.use_amp = self.settings.mixed_precision
        self.amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
        self.scaler = torch.amp.GradScaler(
            device.type, enabled=self.use_amp and self.amp_dtype == torch.float16
        )
        self.snapshot_path = Path(self.settings.snapshot_path)
        self.metrics_path = Path(self.settings.metrics_path)
        self.epochs_run = self.step = 0
        if self.snapshot_path.exists():
            self._load_snapshot()  # before the DDP wrap, which broadcasts rank 0's weights
        elif global_rank == 0:
            self.metrics_path.write_text("")  # a fresh run starts a fresh metrics file
        self.model = DDP(self.model, device_ids=[local_rank] if device.type == "cuda" else None)

        # Both samplers shard by rank; only the training one shuffles (seeded, and
        # reshuffled by set_epoch). drop_last keeps every rank's step count equal.
        self.train_sampler = DistributedSampler(
            train_set, shuffle=True, seed=self.settings.seed, drop_last=True
        )
        self.val_sampler = DistributedSampler(val_set, shuffle=False)
        loader = {"batch_size": self.settings.batch_size, "pin_memory": device.type == "cuda"}
        self.train_loader = DataLoader(
            train_set, sampler=self.train_sampler, drop_last=True, **loader
        )
        self.val_loader = DataLoader(val_set, sampler=self.val_sampler, **loader)
        self.steps_per_epoch = len(self.train_loader)
        if self.steps_per_epoch == 0:
            raise SystemExit(
                f"the training set has fewer chunks than one global batch "
                f"({self.settings.batch_size} x {world_size}): use a smaller "
                f"trainer.batch_size or a longer text"
            )
        self.total_steps = self.settings.max_epochs * self.steps_per_epoch
        if self.settings.max_steps:
            self.total_steps = min(self.total_steps, self.settings.max_steps)
        self.tokens_per_step = self.settings.batch_size * world_size * dataset.block_size

    # -- the learning rate: linear warm-up, then cosine decay to min_lr -------------
    def learning_rate(self, step: int) -> float:
        opt = self.config.optimizer
        if step < opt.warmup_steps:
            return opt.lr * (step + 1) / opt.warmup_steps
        progress = (step - opt.warmup_steps) / max(1, self.total_steps - opt.warmup_steps)
        return opt.min_lr + 0.5 * (opt.lr - opt.min_lr) * (
            1 + math.cos(math.pi * min(progress, 1.0))
        )

    def _run_batch(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate(self.step)
        with torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.use_amp):
            _, loss = self.model(inputs, targets)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()  # DDP all-reduces the gradients here
        if self.config.optimizer.grad_clip > 0:
            # Clip the true gradients: while scaled they are up to 65536x too large,
            # and a clip on them would cut every step (the official series does that).
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.optimizer.grad_clip)
        self.scaler.step(self.optimizer)  # skips the step if fp16 overflowed to inf/nan
        self.scaler.update()
        return loss.detach()

    @torch.no_grad()
    def evaluate(self) -> float:
        """The mean validation loss over all ranks' shards (every rank must call it)."""
        model = self.model.module
        model.eval()
        totals = torch.zeros(2, device=self.device)  # (sum of losses, number of chunks)
        for inputs, targets in self.val_loader:
            inputs, targets = inputs.to(self.device), targets.to(self.device)
            with torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.use_amp):
                _, loss = model(inputs, targets)
            totals[0] += loss.float() * len(inputs)
            totals[1] += len(inputs)
        model.train()
        dist.all_reduce(totals)
        return (totals[0] / totals[1]).item()

    def _record(self, **metrics) -> None:
        if self.global_rank == 0:
            with open(self.metrics_path, "a") as file:
                file.write(json.dumps(metrics) + "\n")

    def _validate_and_record(self, where: str) -> None:
        val_loss = self.evaluate()
        log0(f"{where} step {self.step}/{self.total_steps} validation loss {val_loss:.4f}")
        self._record(
            kind="val",
            step=self.step,
            epoch=self.epochs_run,
            loss=val_loss,
            seconds=self.train_seconds,
        )

    def _maybe_crash(self, epoch: int, step_in_epoch: int) -> None:
        # "Once": torchrun counts its restarts; the restarted group must not crash again.
        if self.crash_at is None or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
            return
        if (self.global_rank, epoch, step_in_epoch) == self.crash_at:
            where = f"epoch {epoch} step {step_in_epoch}"
            log(f"injected failure: pid {os.getpid()} kills itself at {where}")
            os.kill(os.getpid(), signal.SIGKILL)  # dies hard: no cleanup, no exception

    def train(self) -> None:
        self.train_seconds, steps_this_run = 0.0, 0  # of this run, without validation
        if self.step == 0:
            self._validate_and_record("start:")  # about ln(vocabulary): a uniform guess
        for epoch in range(self.epochs_run, self.settings.max_epochs):
            self.train_sampler.set_epoch(epoch)  # a new shuffle per epoch, equal on every rank
            self.val_sampler.set_epoch(epoch)  # no effect unless it shuffles; then it must
            loss_sum, losses = torch.zeros((), device=self.device), 0
            interval_start = time.perf_counter()
            for step_in_epoch, (inputs, targets) in enumerate(self.train_loader):
                self._maybe_crash(epoch, step_in_epoch)
                loss_sum += self._run_batch(inputs.to(self.device), targets.to(self.device))
                self.step, losses, steps_this_run = self.step + 1, losses + 1, steps_this_run + 1
                if self.step % self.settings.log_every == 0 or self.step == self.total_steps:
                    self._progress(epoch, loss_sum, losses, interval_start, steps_this_run)
                    loss_sum, losses, interval_start = loss_sum.zero_(), 0, time.perf_counter()
                if self.step % self.settings.eval_every == 0 and self.step < self.total_steps:
                    validation_start = time.perf_counter()
                    self._validate_and_record(f"epoch {epoch + 1}/{self.settings.max_epochs}")
                    # The interval's clock stops while validating: the next progress line
                    # divides the interval's steps by training time only.
                    interval_start += time.perf_counter() - validation_start
                if self.step >= self.total_steps:
                    break
            self.train_seconds += time.perf_counter() - interval_start
            if step_in_epoch + 1 < self.steps_per_epoch:  # stopped by max_steps mid-epoch
                break
            self.epochs_run = epoch + 1
            self._validate_and_record(f"end of epoch {epoch + 1}/{self.settings.max_epochs}:")
            if self.epochs_run % self.settings.save_every == 0 or self.step >= self.total_steps:
                self._save_snapshot()
            if self.step >= self.total_steps:
                break
        if steps_this_run:
            tokens_per_second = steps_this_run * self.tokens_per_step / self.train_seconds
            log0(
                f"trained {steps_this_run} steps in {self.train_seconds:.1f} s: "
                f"{tokens_per_second:,.0f} tokens/s over {self.world_size} process(es)"
            )

    def _progress(self, epoch, loss_sum, losses, interval_start, steps_this_run) -> None:
        """Rank 0 prints the training loss averaged over ranks, the speed, the time left."""
        dist.all_reduce(loss_sum)  # a collective: every rank joins, rank 0 prints
        mean_loss = loss_sum.item() / (losses * self.world_size)  # .item() waits for the GPU
        seconds = time.perf_counter() - interval_start
        self.train_seconds += seconds
        tokens_per_second = losses * self.tokens_per_step / seconds
        left = (self.total_steps - self.step) * self.train_seconds / steps_this_run
        log0(
            f"epoch {epoch + 1}/{self.settings.max_epochs} step {self.step}/{self.total_steps} "
            f"loss {mean_loss:.4f} | {tokens_per_second:,.0f} tokens/s | {left:.0f} s left"
        )
        self._record(
            kind="train",
            step=self.step,
            epoch=epoch,
            loss=mean_loss,
            tokens_per_second=tokens_per_second,
            seconds=self.train_seconds,
        )

    # -- snapshots ------------------------------------------------------------------
    def _save_snapshot(self) -> None:
        # Every rank's random stream (dropout) is its own: gather them all. This is a
        # collective, so every rank calls it; only the writing is rank 0's alone.
        rng = gather_random_states(self.device)
        if self.global_rank != 0:
            return
        state = {
            "model": self.model.module.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
            "epochs_run": self.epochs_run,
            "step": self.step,
            "rng": rng,
            "chars": self.dataset.chars,
        }
        save_atomic(state, self.snapshot_path)
        log(f"epoch {self.epochs_run} step {self.step}: snapshot saved to {self.snapshot_path}")

    def _load_snapshot(self) -> None:
        state = load(self.snapshot_path, SNAPSHOT_KEYS, map_location=self.device)
        if state["chars"] != self.dataset.chars:
            raise SnapshotError(
                f"snapshot {self.snapshot_path} was trained on another text (its characters "
                "differ); delete it to start from scratch, or train on its text"
            )
        try:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
        except (RuntimeError, ValueError) as error:
            lines = [line.strip() for line in str(error).splitlines() if line.strip()]
            reason = lines[min(1, len(lines) - 1)][:150]  # line 0 only says "Error(s) in..."
            raise SnapshotError(
                f"snapshot {self.snapshot_path} does not fit this model ({reason}); "
                "delete it to start from scratch, or use the config it was trained with"
            ) from None
        self.scaler.load_state_dict(state["scaler"])
        self.epochs_run, self.step = state["epochs_run"], state["step"]
        notice = restore_random_state(state["rng"], self.device)
        if notice:
            log0(notice)
        log(
            f"resuming from snapshot {self.snapshot_path}: {self.epochs_run} epochs, "
            f"{self.step} steps done"
        )

    # -- a sample from the trained model ----------------------------------------------
    def sample(self) -> str:
        """Rank 0 writes `sample_chars` characters after the prompt; reproducible, from
        a generator of its own."""
        settings = self.settings
        generator = torch.Generator(device=self.device).manual_seed(settings.seed)
        prompt = self.dataset.encode(settings.sample_prompt)[None].to(self.device)
        out = self.model.module.generate(
            prompt, settings.sample_chars, settings.temperature, settings.top_k, generator
        )
        return self.dataset.decode(out[0])
