"""Checks of lesson 02's coding exercises; `course.exercises.check` runs them."""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from common.data import IN_FEATURES, SyntheticRegression
from common.models import regression_model
from common.traffic import counting_all_reduce
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


def _one_process_on_whole_batches(scale: float = 1.0) -> torch.Tensor:
    """The weights of one process trained on the whole batches, its loss times `scale`
    (another scale gives the weights of a known mistake: see `_MISSCALED`)."""
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
        (F.mse_loss(model(inputs), targets) * scale).backward()
        optimizer.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


# Known mistakes that scale the gradients: the scale, what it looks like, the fix.
# (With as many micro-batches as ranks, the last two would look alike.)
_MISSCALED = [
    (
        MICRO_BATCHES,
        f"{MICRO_BATCHES} times too large",
        f"the gradients add up over the {MICRO_BATCHES} backward passes, so divide each "
        f"micro-batch's loss by {MICRO_BATCHES}",
    ),
    (
        1 / MICRO_BATCHES,
        f"{MICRO_BATCHES} times too small",
        "were they divided by the number of micro-batches twice? Dividing each "
        "micro-batch's loss by it, once, is enough",
    ),
    (
        1 / WORLD_SIZE,
        f"{WORLD_SIZE} times too small",
        f"DDP already averages the gradients over the {WORLD_SIZE} ranks: do not divide by "
        "the world size",
    ),
]


def accumulate(path) -> str:
    results = run_in_world(path, (__file__, "_train"), WORLD_SIZE)
    for rank, (allreduces, _) in enumerate(results):
        assert allreduces == STEPS, (
            f"rank {rank}: DDP all-reduced the gradients {allreduces} times in {STEPS} steps "
            f"of {MICRO_BATCHES} micro-batches; expected once per step, {STEPS} in all "
            "(the forward and backward of every micro-batch but the last go inside "
            "model.no_sync(); the last one's outside it)"
        )
    for rank, (_, weights) in enumerate(results[1:], start=1):
        apart = (weights - results[0][1]).abs().max().item()
        assert apart < 1e-6, (
            f"rank {rank}'s weights differ from rank 0's by up to {apart:.3g}: the gradients "
            "of the micro-batches after the all-reduce were never averaged over the ranks; "
            "the all-reducing backward must be the last micro-batch's (every earlier one "
            "inside model.no_sync())"
        )
    expected = _one_process_on_whole_batches()
    for rank, (_, weights) in enumerate(results):
        error = (weights - expected).abs().max().item()
        if error < 1e-5:
            continue
        for scale, wrong, fix in _MISSCALED:
            if (weights - _one_process_on_whole_batches(scale)).abs().max().item() < 1e-5:
                raise AssertionError(
                    f"rank {rank}: the weights differ from one process trained on the whole "
                    f"batches by up to {error:.3g}: they are what gradients {wrong} give; {fix}"
                )
        raise AssertionError(
            f"rank {rank}: the weights differ from one process trained on the whole "
            f"batches by up to {error:.3g} (expected {expected.tolist()[:3]}..., got "
            f"{weights.tolist()[:3]}...); is each micro-batch's loss divided by the number "
            "of micro-batches, and is there one optimizer step per call?"
        )
    return (
        f"{STEPS} steps of {MICRO_BATCHES} micro-batches on 2 ranks: {STEPS} all-reduces, and "
        "the weights of one process trained on the whole batches"
    )


def _hook_network() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(IN_FEATURES, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)
    )


def _whole_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    dataset = SyntheticRegression(size=STEPS * WORLD_SIZE * MICRO_BATCH)
    rows = slice(step * WORLD_SIZE * MICRO_BATCH, (step + 1) * WORLD_SIZE * MICRO_BATCH)
    return dataset.inputs[rows], dataset.targets[rows]


def _train_with_hook(exercise):
    """Runs in each process: train with the learner's hook; count what it sends."""
    rank = dist.get_rank()
    model = DDP(_hook_network())
    not_attempted, given = [], set()

    def note_what_it_gives(done: torch.futures.Future):
        value = done.value()
        tensor = isinstance(value, torch.Tensor)
        given.add(f"a {value.dtype} tensor" if tensor else f"a {type(value).__name__}")
        return value

    def hook(state, bucket):
        # DDP calls hooks from C++, which would turn NotImplementedError into a
        # RuntimeError: catch it here, send the bucket the plain way, re-raise below.
        try:
            future = exercise.fp16_average_hook(state, bucket)
        except NotImplementedError as error:
            not_attempted.append(error)
            return default_hooks.allreduce_hook(None, bucket)
        # DDP copies whatever the Future gives into the gradients, converting a float16
        # tensor without a word: only this shows that the hook broke its contract.
        return future.then(note_what_it_gives)

    model.register_comm_hook(None, hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    counter = {}
    for step in range(STEPS):
        inputs, targets = _whole_batch(step)
        mine = slice(rank * MICRO_BATCH, (rank + 1) * MICRO_BATCH)
        optimizer.zero_grad()
        with counting_all_reduce(counter):
            F.mse_loss(model(inputs[mine]), targets[mine]).backward()
        if not_attempted:
            raise not_attempted[0]
        optimizer.step()
    gradient_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    dtypes = sorted(map(str, counter["dtypes"]))
    return counter["bytes"], dtypes, sorted(given), gradient_bytes, weights


def fp16_hook(path) -> str:
    results = run_in_world(path, (__file__, "_train_with_hook"), WORLD_SIZE)
    reference = _hook_network()
    optimizer = torch.optim.SGD(reference.parameters(), lr=LR)
    for step in range(STEPS):
        optimizer.zero_grad()
        F.mse_loss(reference(_whole_batch(step)[0]), _whole_batch(step)[1]).backward()
        optimizer.step()
    expected = torch.cat([p.detach().flatten() for p in reference.parameters()])
    for rank, (sent, dtypes, given, gradient_bytes, weights) in enumerate(results):
        assert dtypes == ["torch.float16"], (
            f"rank {rank}: your hook handed all_reduce tensors of {dtypes or 'no dtype'}; "
            "expected float16 only (convert the bucket with .to(torch.float16), and send it "
            "with torch.distributed.all_reduce)"
        )
        assert sent == STEPS * gradient_bytes // 2, (
            f"rank {rank}: your hook sent {sent} bytes in {STEPS} steps; expected "
            f"{STEPS * gradient_bytes // 2}, half of the {gradient_bytes} bytes of float32 "
            "gradients per step"
        )
        assert given == ["a torch.float32 tensor"], (
            f"rank {rank}: your hook's Future gave {' and '.join(given)}; expected "
            "the float32 bucket (copy the sum back into bucket.buffer() and return that)"
        )
        error = (weights - expected).abs().max().item()
        assert error < 1e-3, (
            f"rank {rank}: the weights differ from one process trained on the whole "
            f"batches by up to {error:.3g}, more than float16's rounding explains; is the "
            "bucket divided by the world size, and the average copied back into it?"
        )
    return (
        f"{STEPS} steps on 2 ranks: every gradient sent as float16, "
        f"{results[0][0]} bytes (half of float32), and the weights of one process "
        "on the whole batches to float16's precision"
    )
