"""The training rungs after 02 (03's `multigpu_torchrun.py` and `multigpu_preemptible.py`,
04's `multinode.py`) train as DDP must: with 2 processes, each step is one SGD step on the
mean of the ranks' batch losses, each rank's batch from its DistributedSampler shard of that
epoch's order, and the loss printed per epoch is the mean over every step of both ranks,
as a one-process model of it computes. (02's check cell proves it of `multigpu.py`; the
later rungs change the optimizer and add snapshots, so their DDP lines are checked here.)"""

import re

import pytest
import torch
import torch.nn.functional as F
from conftest import REPO, lesson_module
from torch.utils.data import DataLoader, DistributedSampler

from common.launch import run

RUNGS = [
    "03_fault_tolerance/multigpu_torchrun.py",
    "03_fault_tolerance/multigpu_preemptible.py",
    "04_multinode/multinode.py",
]
EPOCHS, WORLD_SIZE, BATCH_SIZE = 3, 2, 32  # BATCH_SIZE: the scripts' default --batch_size
EPOCH_LOSS = re.compile(
    rf"^\[rank0\] epoch (\d+) \| world size {WORLD_SIZE} \| .* loss ([\d.]+)$", re.M
)


def one_process_model_of_ddp(script: str) -> tuple[dict, list[float]]:
    """(final weights, loss per epoch) of `script`'s training, as one process computes it
    from the script's own data, model, optimizer (load_train_objs) and SHUFFLE_SEED."""
    lesson, name = script.removesuffix(".py").split("/")
    rung = lesson_module(lesson, name)
    dataset, model, optimizer = rung.load_train_objs()
    samplers = [
        DistributedSampler(
            dataset, num_replicas=WORLD_SIZE, rank=rank, shuffle=True, seed=rung.SHUFFLE_SEED
        )
        for rank in range(WORLD_SIZE)
    ]
    epoch_losses = []
    for epoch in range(EPOCHS):
        for sampler in samplers:
            sampler.set_epoch(epoch)
        loaders = [DataLoader(dataset, batch_size=BATCH_SIZE, sampler=s) for s in samplers]
        step_losses = []
        for batches in zip(*loaders, strict=True):
            optimizer.zero_grad()
            losses = [F.mse_loss(model(inputs), targets) for inputs, targets in batches]
            torch.stack(losses).mean().backward()  # DDP averages the ranks' gradients
            optimizer.step()
            step_losses += [loss.item() for loss in losses]
        epoch_losses.append(sum(step_losses) / len(step_losses))
    return model.state_dict(), epoch_losses


@pytest.mark.parametrize("script", RUNGS)
def test_a_rung_trains_as_one_process_on_the_mean_of_its_ranks_losses(script, tmp_path):
    output = run(
        f"torchrun --standalone --nproc_per_node={WORLD_SIZE} {REPO / script} {EPOCHS} {EPOCHS}",
        cwd=tmp_path,
        quiet=True,
    )
    weights, losses = one_process_model_of_ddp(script)
    printed = [(int(epoch), float(loss)) for epoch, loss in EPOCH_LOSS.findall(output)]
    assert [epoch for epoch, _ in printed] == list(range(EPOCHS)), output[-3000:]
    for (_, loss), want in zip(printed, losses, strict=True):
        assert loss == pytest.approx(want, rel=1e-5, abs=2e-6)  # printed to 6 decimals
    saved = torch.load(tmp_path / "snapshot.pt", weights_only=True)["model"]
    assert saved.keys() == weights.keys()
    for name, tensor in weights.items():
        torch.testing.assert_close(saved[name], tensor, rtol=0, atol=1e-6, msg=name)
