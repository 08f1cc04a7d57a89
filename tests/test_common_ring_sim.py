"""Lesson 01's simulated ring all-reduce (`common/ring_sim.py`, no network) and its figures."""

import matplotlib
import pytest
import torch
from test_common_ring import chunk_sizes

from common.ring import chunk_bounds
from common.ring_sim import simulate_reduce_then_broadcast, simulate_ring_all_reduce

matplotlib.use("Agg")


def inputs_for(world_size, numel, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(numel, generator=generator, dtype=torch.float64) for _ in range(world_size)]


@pytest.mark.parametrize("world_size", [2, 3, 5])
def test_rank_r_owns_the_sum_of_chunk_r_plus_1_then_every_rank_every_sum(world_size):
    inputs = inputs_for(world_size, 4 * world_size + 1)
    record = simulate_ring_all_reduce(inputs)
    middle = record.steps[world_size - 1]  # the last reduce-scatter step
    assert middle.phase == "reduce-scatter"
    total, b, everyone = torch.stack(inputs).sum(0), record.bounds, frozenset(range(world_size))
    for rank in range(world_size):
        owned = (rank + 1) % world_size
        torch.testing.assert_close(middle.chunks[rank][owned], total[b[owned] : b[owned + 1]])
        # ... and no other chunk of that rank is complete yet.
        complete = [c for c, held in enumerate(middle.contributors[rank]) if held == everyone]
        assert complete == [owned]
    final = record.steps[-1].contributors  # after the all-gather: every chunk complete
    assert all(held == everyone for row in final for held in row)


@pytest.mark.parametrize("world_size", [2, 3, 4, 8])
def test_every_message_goes_to_the_right_neighbour(world_size):
    record = simulate_ring_all_reduce(inputs_for(world_size, 16))
    for step in record.steps[1:]:
        assert sorted(t.sender for t in step.transfers) == list(range(world_size))
        assert all(t.receiver == (t.sender + 1) % world_size for t in step.transfers)
        assert sorted(t.chunk for t in step.transfers) == list(range(world_size))


@pytest.mark.parametrize("numel", [1, 5, 12, 1000, 1003])
@pytest.mark.parametrize("world_size", [2, 3, 4, 6])
def test_ring_traffic_is_2_n_minus_1_over_n_per_rank(world_size, numel):
    sent = simulate_ring_all_reduce(inputs_for(world_size, numel)).elements_sent()
    assert sum(sent) == 2 * (world_size - 1) * numel
    sizes = chunk_sizes(numel, world_size)
    for rank in range(world_size):
        # Every chunk but (r+1) in reduce-scatter, every chunk but (r+2) in all-gather.
        expected = 2 * numel - sizes[(rank + 1) % world_size] - sizes[(rank + 2) % world_size]
        assert sent[rank] == expected
    if numel % world_size == 0:
        assert sent == [2 * (world_size - 1) * numel // world_size] * world_size


@pytest.mark.parametrize("world_size", [2, 4, 9])
def test_reduce_then_broadcast_is_right_and_loads_the_root(world_size):
    inputs = inputs_for(world_size, 10)
    record = simulate_reduce_then_broadcast(inputs)
    for output in record.outputs:
        torch.testing.assert_close(output, torch.stack(inputs).sum(0))
    assert record.elements_sent()[0] == (world_size - 1) * 10
    assert record.elements_received()[0] == (world_size - 1) * 10
    assert all(sent == 10 for sent in record.elements_sent()[1:])


@pytest.mark.parametrize("numel,world_size", [(0, 3), (1, 4), (10, 4), (12, 4), (5, 1)])
def test_chunk_bounds_cover_the_tensor_in_nearly_equal_chunks(numel, world_size):
    bounds = chunk_bounds(numel, world_size)
    sizes = chunk_sizes(numel, world_size)
    assert bounds[0] == 0 and bounds[-1] == numel and len(sizes) == world_size
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


def test_figures_show_every_step_in_order():
    from common.viz import ring_animation, ring_figure_grid

    record = simulate_ring_all_reduce(inputs_for(3, 6))
    figure = ring_figure_grid(record)
    titles = [ax.get_title() for ax in figure.axes if ax.get_title()]
    assert titles == [
        "start: each rank holds its own tensor",
        "reduce-scatter 1/2",
        "reduce-scatter 2/2",
        "all-gather 1/2",
        "all-gather 2/2",
    ]
    html = ring_animation(record).to_jshtml()
    assert html.count("data:image/png;base64") == len(record.steps)


def test_inputs_of_different_sizes_are_refused():
    with pytest.raises(ValueError, match="same size"):
        simulate_ring_all_reduce([torch.ones(3), torch.ones(4)])
