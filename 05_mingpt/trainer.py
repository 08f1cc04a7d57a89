"""Lesson 05: the trainer of a real project, grown from lesson 03's.

Used by `main.py` (see its docstring for the commands that launch the lesson).

What it adds to lesson 03's trainer: a global batch that stays the same whatever the
number of processes (each process runs micro-batches and DDP all-reduces on the last
one only); a validation loss averaged over ranks; a learning-rate schedule; mixed
precision chosen by `trainer.amp` (precision.py), with the gradients clipped *after*
they are unscaled; snapshots at ends of epochs and every N steps that hold the
optimizer, the scaler, the step, every rank's random state and the settings, and
resumes checked for what could silently go wrong (resume.py); a progress line with
the gradient norm, tokens per second, MFU (efficiency.py) and time left; a metrics
file for plotting; and a text sample at the end.
"""

import json
import math
import os
import signal
from contextlib import nullcontext
from itertools import islice
from pathlib import Path

import torch
import torch.distributed as dist
from config import Config, shaping_settings
from efficiency import flops_per_token, measured_peak_flops
from interval import Interval
from precision import allow_tf32, choose_precision
from resume import check_ranks_agree, check_settings, keep_metrics_up_to, scaler_notice
from schedule import count_steps, learning_rate, micro_batching
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from common.distributed import log, log0
from common.random_state import gather_random_states, restore_random_state
from common.snapshot import SnapshotError, load, save_atomic

SNAPSHOT_KEYS = ("model", "optimizer", "scaler", "step", "rng", "chars", "settings", "seconds")


class Trainer:
    def __init__(self, config: Config, model, optimizer, vocabulary, train_set, val_set,
                 device, local_rank: int, global_rank: int, world_size: int,
                 crash_at=None, resume_with_new_config=False):  # fmt: skip
        self.config, self.settings = config, config.trainer
        settings = config.trainer
        self.device, self.global_rank, self.world_size = device, global_rank, world_size
        self.vocabulary, self.train_set = vocabulary, train_set
        self.crash_at = crash_at  # (rank, epoch, step) counted from 0, or None
        self.raw_model, self.optimizer = model.to(device), optimizer

        self.batch_size, self.micro_batches = micro_batching(config, world_size)
        self.steps_per_epoch, self.total_steps = count_steps(config, len(train_set))
        self.tokens_per_step = settings.global_batch_size * train_set.block_size
        self.settings_saved = {**shaping_settings(config), "steps_per_epoch": self.steps_per_epoch}

        # The training windows are random already (char_dataset.py): the sampler does
        # not shuffle, it deals each rank its share of every global batch. Validation:
        # every rank a strided share of the windows, each window once. Each loader
        # draws its epoch seed from a generator of its own, not from the global one,
        # whose stream (dropout) a resume must replay exactly.
        self.train_sampler = DistributedSampler(train_set, shuffle=False, drop_last=True)
        loader = {"pin_memory": device.type == "cuda", "generator": torch.Generator()}
        self.train_loader = DataLoader(
            train_set, self.batch_size, sampler=self.train_sampler, drop_last=True, **loader
        )
        val_share = range(global_rank, len(val_set), world_size)
        self.val_loader = DataLoader(val_set, self.batch_size, sampler=val_share, **loader)

        allow_tf32(device)
        inputs, targets = next(iter(self.train_loader))
        with torch.random.fork_rng(devices=[]):  # timing must not move dropout's stream
            self.precision = choose_precision(
                settings.amp, device, self.raw_model, inputs.to(device), targets.to(device)
            )
        # fp16 needs loss scaling (small gradients go subnormal or to 0: precision.py);
        # bf16 has float32's range and does not. A disabled scaler changes nothing.
        self.scaler = torch.amp.GradScaler(device.type, enabled=self.precision.loss_scaling)
        peak = settings.peak_tflops * 1e12 or measured_peak_flops(device, self.precision.dtype)
        self.peak_flops = peak * world_size
        parameters = sum(p.numel() for p in self.raw_model.parameters())
        shape = self.config.model
        self.flops_per_token = flops_per_token(
            parameters, shape.n_layer, shape.n_embd, train_set.block_size
        )

        self.snapshot_path = Path(settings.snapshot_path)
        self.metrics_path = Path(settings.metrics_path)
        self.step, self.train_seconds = 0, 0.0
        error = None
        if self.snapshot_path.exists():
            try:  # before the DDP wrap, which broadcasts rank 0's weights
                self._load_snapshot(resume_with_new_config)
            except SnapshotError as problem:
                error = str(problem)
        check_ranks_agree(None if error else self.step, error, global_rank, self.snapshot_path)
        if global_rank == 0:
            keep_metrics_up_to(self.metrics_path, self.step)  # a fresh run: an empty file

        # torch.compile before the DDP wrap: DDP then calls the compiled module.
        compiled = torch.compile(self.raw_model) if settings.compile else self.raw_model
        self.model = DDP(compiled, device_ids=[local_rank] if device.type == "cuda" else None)
        log0(
            f"global batch {settings.global_batch_size} = {world_size} process(es) x "
            f"{self.micro_batches} micro-batch(es) x {self.batch_size} sequences; "
            f"{self.steps_per_epoch} steps per epoch; precision {self.precision.why}"
        )

    @property
    def finished(self) -> bool:
        return self.step >= self.total_steps

    def _run_step(self, micro_batches) -> tuple[torch.Tensor, torch.Tensor]:
        """One optimizer step on this process's micro-batches: (loss, gradient norm)."""
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(self.config.optimizer, self.step, self.total_steps)
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = torch.zeros((), device=self.device)
        for index, (inputs, targets) in enumerate(micro_batches):
            inputs, targets = inputs.to(self.device), targets.to(self.device)
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
            inputs, targets = inputs.to(self.device), targets.to(self.device)
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
                file.write(json.dumps(metrics) + "\n")

    def _validate_and_record(self, where: str) -> None:
        val_loss = self.evaluate()
        log0(f"{where} step {self.step}/{self.total_steps} validation loss {val_loss:.4f}")
        self._record(kind="val", step=self.step, epoch=self.step // self.steps_per_epoch,
                     loss=val_loss, seconds=self.train_seconds)  # fmt: skip

    def _maybe_crash(self, epoch: int, step_in_epoch: int) -> None:
        # "Once": torchrun counts its restarts; the restarted group must not crash again.
        if self.crash_at is None or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
            return
        if (self.global_rank, epoch, step_in_epoch) == self.crash_at:
            where = f"epoch {epoch} step {step_in_epoch}"
            log(f"injected failure: pid {os.getpid()} kills itself at {where}")
            os.kill(os.getpid(), signal.SIGKILL)  # dies hard: no cleanup, no exception

    def train(self) -> None:
        steps_before, seconds_before = self.step, self.train_seconds
        if self.step == 0:
            self._validate_and_record("start:")  # about ln(vocabulary): a uniform guess
        while not self.finished:
            epoch, first = divmod(self.step, self.steps_per_epoch)
            self._train_epoch(epoch, first)
            epochs = f"epoch {epoch + 1}/{self.settings.max_epochs}"
            at_end = self.step % self.steps_per_epoch == 0
            self._validate_and_record(f"end of {epochs}:" if at_end else "trainer.max_steps:")
            if not at_end or self.finished or (epoch + 1) % self.settings.save_every == 0:
                self._save_snapshot()
        steps, seconds = self.step - steps_before, self.train_seconds - seconds_before
        if steps:
            tokens_per_second = steps * self.tokens_per_step / seconds
            log0(
                f"trained {steps} steps in {seconds:.1f} s: {tokens_per_second:,.0f} tokens/s "
                f"over {self.world_size} process(es)"
            )

    def _train_epoch(self, epoch: int, first: int) -> None:
        """Steps `first`, ... of `epoch`, up to its end or trainer.max_steps."""
        self.train_set.set_epoch(epoch)  # this epoch's window offsets, on every rank alike
        # A resumed epoch skips the micro-batches its first steps took before the stop.
        batches = islice(self.train_loader, first * self.micro_batches, None)
        last = min(self.steps_per_epoch, first + self.total_steps - self.step)
        self.interval = Interval(self.device)
        for step_in_epoch in range(first, last):
            self._maybe_crash(epoch, step_in_epoch)
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

    def _progress(self, epoch: int) -> None:
        """Rank 0 prints the training loss averaged over ranks, the gradient norm, the
        speed, the MFU and the time left."""
        interval = self.interval
        dist.all_reduce(interval.loss_sum)  # a collective: every rank joins, rank 0 prints
        steps, seconds = interval.steps, interval.seconds()
        self.train_seconds += seconds
        mean_loss = interval.loss_sum.item() / (steps * self.world_size)  # waits for the GPU
        finite = int(interval.finite_norms.item())  # the same on every rank: after all-reduce
        grad_norm = interval.norm_sum.item() / finite if finite else math.inf
        tokens_per_second = steps * self.tokens_per_step / seconds
        mfu = tokens_per_second * self.flops_per_token / self.peak_flops
        left = (self.total_steps - self.step) * seconds / steps
        skipped = f" ({steps - finite} skipped: fp16 overflow)" if finite < steps else ""
        log0(
            f"epoch {epoch + 1}/{self.settings.max_epochs} step {self.step}/{self.total_steps} "
            f"loss {mean_loss:.4f} | grad norm {grad_norm:.3f}{skipped} | "
            f"{tokens_per_second:,.0f} tokens/s | MFU {mfu:.1%} | {left:.0f} s left"
        )
        self._record(kind="train", step=self.step, epoch=epoch, loss=mean_loss,
                     grad_norm=grad_norm, tokens_per_second=tokens_per_second, mfu=mfu,
                     seconds=self.train_seconds)  # fmt: skip
        self.interval = Interval(self.device)

    # -- snapshots ------------------------------------------------------------------
    def _save_snapshot(self) -> None:
        # Every rank's random stream (dropout) is its own: gather them all. This is a
        # collective, so every rank calls it; only the writing is rank 0's alone.
        rng = gather_random_states(self.device)
        if self.global_rank != 0:
            return
        state = {
            "model": self.raw_model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),  # empty unless fp16
            "epochs_run": self.step // self.steps_per_epoch,
            "step": self.step,
            "rng": rng,
            "chars": self.vocabulary.chars,
            "settings": self.settings_saved,
            "seconds": self.train_seconds,
        }
        save_atomic(state, self.snapshot_path)
        log(f"step {self.step}: snapshot saved to {self.snapshot_path}")

    def _load_snapshot(self, resume_with_new_config: bool) -> None:
        state = load(self.snapshot_path, SNAPSHOT_KEYS, map_location=self.device)
        if state["chars"] != self.vocabulary.chars:
            raise SnapshotError(
                f"snapshot {self.snapshot_path} was trained on another text (its characters "
                "differ); delete it to start from scratch, or train on its text"
            )
        notices = [
            check_settings(state["settings"], self.settings_saved, self.snapshot_path,
                           resume_with_new_config),
            scaler_notice(state["scaler"], self.scaler.is_enabled(), self.precision.name),
        ]  # fmt: skip
        try:
            self.raw_model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
        except (RuntimeError, ValueError) as error:
            lines = [line.strip() for line in str(error).splitlines() if line.strip()]
            reason = lines[min(1, len(lines) - 1)][:150]  # line 0 only says "Error(s) in..."
            raise SnapshotError(
                f"snapshot {self.snapshot_path} does not fit this model ({reason}); "
                "delete it to start from scratch, or use the config it was trained with"
            ) from None
        if notices[1] is None:
            self.scaler.load_state_dict(state["scaler"])
        self.step, self.train_seconds = state["step"], state["seconds"]
        notices.append(restore_random_state(state["rng"], self.device))
        for notice in filter(None, notices):
            log0(notice)
        log(
            f"resuming from snapshot {self.snapshot_path}: {self.step // self.steps_per_epoch} "
            f"epochs, {self.step} steps done"
        )

    # -- a sample from the trained model ----------------------------------------------
    def sample(self) -> str:
        """Rank 0 writes `sample_chars` characters after the prompt; reproducible, from
        a generator of its own."""
        settings = self.settings
        generator = torch.Generator(device=self.device).manual_seed(settings.seed)
        prompt = self.vocabulary.encode(settings.sample_prompt)[None].to(self.device)
        out = self.raw_model.generate(
            prompt, settings.sample_chars, settings.temperature, settings.top_k, generator
        )
        return self.vocabulary.decode(out[0])
