"""Ring all-reduce simulated: N ranks in one process, every step recorded.

Introduced in 01_theory, whose figures and animation are drawn from the record
(`common.viz`), and its interactive stepper too (`common.ring_stepper`); `common.ring`
is the same algorithm over real processes.

The simulation moves real tensors between N Python lists, exactly as the ranks of
`common.ring.ring_all_reduce` do, and writes down for every step which rank sent
which chunk to whom, what it carried, and every rank's buffers afterwards. It also
tracks, for each rank and chunk, *which ranks' inputs have been added in so far*:
that is what the figures colour. `simulate_reduce_then_broadcast` records the naive
alternative (everyone sends to rank 0, rank 0 sends the sum back) for comparison.
"""

from dataclasses import dataclass, field

import torch

from common.ring import chunk_bounds


@dataclass
class Transfer:
    """One message: `sender` sends chunk `chunk` (its `values`) to `receiver`."""

    sender: int
    receiver: int
    chunk: int
    values: torch.Tensor


@dataclass
class Step:
    """One step of the algorithm: the messages sent during it, and each rank's chunks
    (and which ranks contributed to each) once they have arrived."""

    phase: str  # "start", "reduce-scatter", "all-gather" or "broadcast"
    number: int  # 1, 2, ... within its phase (0 for the start)
    transfers: list[Transfer]
    chunks: list[list[torch.Tensor]]  # chunks[rank][chunk]
    contributors: list[list[frozenset[int]]]  # contributors[rank][chunk]


@dataclass
class Record:
    world_size: int
    bounds: list[int]  # chunk c is elements bounds[c]:bounds[c+1]
    inputs: list[torch.Tensor]
    steps: list[Step] = field(default_factory=list)

    @property
    def outputs(self) -> list[torch.Tensor]:
        return [torch.cat(chunks) for chunks in self.steps[-1].chunks]

    @property
    def true_sum(self) -> torch.Tensor:
        return torch.stack(self.inputs).sum(dim=0)

    def step_title(self, index: int) -> str:
        """Step `index` in words, as the figures and the stepper title it:
        "reduce-scatter 2/3" is the second of the phase's three steps."""
        step = self.steps[index]
        if step.phase == "start":
            return "start: each rank holds its own tensor"
        steps_in_phase = sum(s.phase == step.phase for s in self.steps)
        return f"{step.phase} {step.number}/{steps_in_phase}"

    def elements_sent(self) -> list[int]:
        """How many elements each rank sent, over the whole run."""
        sent = [0] * self.world_size
        for step in self.steps:
            for transfer in step.transfers:
                sent[transfer.sender] += transfer.values.numel()
        return sent

    def elements_received(self) -> list[int]:
        received = [0] * self.world_size
        for step in self.steps:
            for transfer in step.transfers:
                received[transfer.receiver] += transfer.values.numel()
        return received


def _start(inputs: list[torch.Tensor], world_size: int) -> Record:
    if len(inputs) != world_size or any(t.shape != inputs[0].shape for t in inputs):
        raise ValueError("give one flat tensor per rank, all of the same size")
    bounds = chunk_bounds(inputs[0].numel(), world_size)
    chunks = [[t[bounds[c] : bounds[c + 1]].clone() for c in range(world_size)] for t in inputs]
    contributors = [[frozenset({rank})] * world_size for rank in range(world_size)]
    record = Record(world_size, bounds, [t.clone() for t in inputs])
    record.steps.append(Step("start", 0, [], chunks, contributors))
    return record


def _next(record: Record, phase: str, number: int, transfers: list[Transfer], add: bool) -> None:
    """Deliver `transfers` (all sent at once, from the buffers as they were) and record
    the state afterwards. `add`: the receiver adds the chunk into its own, else it
    replaces its own with it."""
    before = record.steps[-1]
    chunks = [list(row) for row in before.chunks]
    contributors = [list(row) for row in before.contributors]
    for t in transfers:
        sender_had = before.contributors[t.sender][t.chunk]
        if add:
            chunks[t.receiver][t.chunk] = chunks[t.receiver][t.chunk] + t.values
            contributors[t.receiver][t.chunk] = contributors[t.receiver][t.chunk] | sender_had
        else:
            chunks[t.receiver][t.chunk] = t.values.clone()
            contributors[t.receiver][t.chunk] = sender_had
    record.steps.append(Step(phase, number, transfers, chunks, contributors))


def simulate_ring_all_reduce(inputs: list[torch.Tensor]) -> Record:
    """Run the ring on `inputs` (one flat tensor per rank) and record every step."""
    world_size = len(inputs)
    record = _start(inputs, world_size)
    for step in range(world_size - 1):
        # Rank r sends chunk (r - step) to the right; the receiver adds it to its own.
        transfers = []
        for rank in range(world_size):
            chunk = (rank - step) % world_size
            values = record.steps[-1].chunks[rank][chunk]
            transfers.append(Transfer(rank, (rank + 1) % world_size, chunk, values))
        _next(record, "reduce-scatter", step + 1, transfers, add=True)
    for step in range(world_size - 1):
        # Rank r now owns the full sum of chunk (r + 1); pass the finished chunks on.
        transfers = []
        for rank in range(world_size):
            chunk = (rank + 1 - step) % world_size
            values = record.steps[-1].chunks[rank][chunk]
            transfers.append(Transfer(rank, (rank + 1) % world_size, chunk, values))
        _next(record, "all-gather", step + 1, transfers, add=False)
    return record


def simulate_reduce_then_broadcast(inputs: list[torch.Tensor], root: int = 0) -> Record:
    """The naive all-reduce: every rank sends its whole tensor to `root`, which adds
    them up and sends the sum back to every rank. One chunk (the whole tensor)."""
    world_size = len(inputs)
    record = _start(inputs, 1 if world_size == 1 else world_size)
    # Treat the tensor as one chunk: merge the per-chunk buffers of the start.
    start = record.steps[0]
    start.chunks = [[torch.cat(row)] for row in start.chunks]
    start.contributors = [[frozenset({rank})] for rank in range(world_size)]
    record.bounds = [0, inputs[0].numel()]
    others = [rank for rank in range(world_size) if rank != root]
    transfers = [Transfer(rank, root, 0, start.chunks[rank][0]) for rank in others]
    _next(record, "reduce", 1, transfers, add=True)
    summed = record.steps[-1].chunks[root][0]
    _next(record, "broadcast", 1, [Transfer(root, r, 0, summed) for r in others], add=False)
    return record
