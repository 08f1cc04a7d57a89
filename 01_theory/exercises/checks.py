"""Checks of lesson 01's coding exercises; `course.exercises.check` runs them."""

import torch

from course.exercises import load


def _recording_pass_right(steps: list[bool]):
    """The exercise's `pass_right`, as the task defines it, writing down every step."""

    def pass_right(chunks, sending, add):
        world_size = len(chunks)
        got = repr(sending)
        if isinstance(sending, torch.Tensor):
            got = f"a tensor, {got} (.tolist() turns it into one)"
        assert (
            isinstance(sending, list | tuple)
            and len(sending) == world_size
            and all(isinstance(c, int) and 0 <= c < world_size for c in sending)
        ), (
            f"sending must be a list of Python ints, one chunk index (0..{world_size - 1}) "
            f"per rank; got {got}"
        )
        steps.append(add)
        messages = [
            (rank, sending[rank], chunks[rank][sending[rank]].clone()) for rank in range(world_size)
        ]
        for sender, chunk, values in messages:
            receiver = (sender + 1) % world_size
            chunks[receiver][chunk] = chunks[receiver][chunk] + values if add else values

    return pass_right


def ring(path) -> str:
    exercise = load(path)
    generator = torch.Generator().manual_seed(0)
    cases = 0
    for world_size in range(1, 6):
        for size in sorted({1, 3, 7, 12, world_size * 4 + 1}):
            # Whole numbers: sums are exact in float32 whatever the order of additions.
            tensors = [
                torch.randint(-50, 50, (size,), generator=generator).float()
                for _ in range(world_size)
            ]
            expected = torch.stack(tensors).sum(dim=0)
            steps: list[bool] = []
            exercise.pass_right = _recording_pass_right(steps)  # the ring's only way to talk
            outputs = exercise.ring_all_reduce([t.clone() for t in tensors])
            case = f"N = {world_size} ranks, tensors of {size} elements"
            ring_steps = [True] * (world_size - 1) + [False] * (world_size - 1)
            assert steps == ring_steps, (
                f"{case}: the ring takes N-1 = {world_size - 1} steps with add=True "
                f"(reduce-scatter), then {world_size - 1} with add=False (all-gather); "
                f"yours called pass_right with add={steps}"
            )
            assert len(outputs) == world_size, (
                f"{case}: expected one output per rank, got {len(outputs)}"
            )
            for rank, output in enumerate(outputs):
                assert output.shape == expected.shape and torch.equal(output, expected), (
                    f"{case}: rank {rank} should hold the sum {expected.tolist()}, "
                    f"got {output.tolist()}"
                )
            cases += 1
    return (
        f"every rank holds the exact sum in {cases} cases "
        "(N = 1 to 5 ranks, sizes N does not divide, tensors smaller than N)"
    )
