"""Lesson 03's Trainer after one step, under torchrun: are its parameters, gradients,
momentum and batch all on this process's own device (cuda:<local rank>, or the CPU)?"""

import importlib.util
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

LESSON = Path(__file__).resolve().parents[2] / "03_fault_tolerance" / "multigpu_torchrun.py"
spec = importlib.util.spec_from_file_location("multigpu_torchrun", LESSON)
lesson = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lesson)  # its `if __name__ == "__main__":` part does not run

device = lesson.ddp_setup()
dataset, model, optimizer = lesson.load_train_objs()
train_data = lesson.prepare_dataloader(dataset, 8, device)
trainer = lesson.Trainer(model, train_data, optimizer, device, 1, Path("never_written.pt"))
source, targets = next(iter(train_data))
# As the lesson's epoch loop moves them.
source = source.to(device, non_blocking=True)
targets = targets.to(device, non_blocking=True)
trainer._run_batch(source, targets)

parameters = list(trainer.model.parameters())
places = {
    "parameters": {p.device for p in parameters},
    "gradients": {p.grad.device for p in parameters},
    "momentum": {optimizer.state[p]["momentum_buffer"].device for p in parameters},
    "batch": {source.device, targets.device},
}
local_rank = int(os.environ["LOCAL_RANK"])
wanted = torch.device("cuda", local_rank) if device.type == "cuda" else torch.device("cpu")
found = ", ".join(f"{what} on {sorted(map(str, where))}" for what, where in places.items())
dist.destroy_process_group()
if any(where != {wanted} for where in places.values()):
    sys.exit(f"[rank{local_rank}] not all on {wanted}: {found}")
print(f"[rank{local_rank}] every tensor on {wanted}: {found}", flush=True)
