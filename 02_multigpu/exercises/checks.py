"""Checks of lesson 02's coding exercises; `course.exercises.check` runs them."""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from common.data import SyntheticRegression
from common.models import regression_model
from course.exercises import run_in_world

WORLD_SIZE, STEPS, MICRO_BATCHES, MICRO_BATCH, LR = 2, 3, 4, 8, 0.05


def _micro_batch(step: int, index: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank `rank`'s micro-batch `index` of step `step`: its own slice of the data."""
    dataset = SyntheticRegression(size=STEPS * MICRO_BATCHES * WORLD_SIZE * MICRO_BATCH)
    start = ((step * MICRO_BATCHES + index) * WORLD_SIZE + rank) * MICRO_BATCH
    return dataset.inputs[start : start + MICRO_BATCH], dataset.targets[start : start + MICRO_BATCH]


def _counting_allreduce(state: dict, bucket: dist.GradBucket):
    state["allreduces"] += 1
    return default_hooks.allreduce_hook(None, bucket)


def _train(exercise):
    """Runs in each process: train with the learner's step; count the all-reduces."""
    rank = dist.get_rank()
    model = DDP(regression_model(seed=0))
    counter = {"allreduces": 0}
    model.register_comm_hook(counter, _counting_allreduce)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        micro_batches = [_micro_batch(step, index, rank) for index in range(MICRO_BATCHES)]
        exercise.accumulation_step(model, optimizer, micro_batches)
    return counter["allreduces"], torch.cat([p.detach().flatten() for p in model.parameters()])


def _one_process_on_whole_batches() -> torch.Tensor:
    model = regression_model(seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        pieces = [
            _micro_batch(step, index, rank)
            for index in range(MICRO_BATCHES)
            for rank in range(WORLD_SIZE)
        ]
        inputs, targets = (torch.cat(part) for part in zip(*pieces, strict=True))
        optimizer.zero_grad()
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def accumulate(path) -> str:
    results = run_in_world(path, (__file__, "_train"), WORLD_SIZE)
    for rank, (allreduces, _) in enumerate(results):
        assert allreduces == STEPS, (
            f"rank {rank}: DDP all-reduced the gradients {allreduces} times in {STEPS} steps "
            f"of {MICRO_BATCHES} micro-batches; expected once per step, {STEPS} in all "
            "(the forward and backward of every micro-batch but the last go inside "
            "model.no_sync(); the last one's outside it)"
        )
    expected = _one_process_on_whole_batches()
    for rank, (_, weights) in enumerate(results):
        error = (weights - expected).abs().max().item()
        assert error < 1e-5, (
            f"rank {rank}: the weights differ from one process trained on the whole "
            f"batches by up to {error:.3g} (expected {expected.tolist()[:3]}..., got "
            f"{weights.tolist()[:3]}...); is each micro-batch's loss divided by the number "
            "of micro-batches, and is there one optimizer step per call?"
        )
    return (
        f"{STEPS} steps of {MICRO_BATCHES} micro-batches on 2 ranks: {STEPS} all-reduces, and "
        "the weights of one process trained on the whole batches"
    )
