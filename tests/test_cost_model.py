"""The alpha-beta cost model (`common.cost_model`) and its predictions at scale
(`common.at_scale`): each formula against what it models (the ring simulation's
messages, DDP's own bucketing, lesson 05's GPT), the fit against data made from known
alpha and beta, and the step timeline on cases worked out by hand."""

import random

import pytest
import torch
import torch.distributed as dist
from conftest import lesson_module

from common import at_scale, cost_model
from common.cost_model import (
    Link,
    assign_buckets,
    fit_alpha_beta,
    reduce_broadcast_seconds,
    relative_errors,
    ring_seconds,
    step_timeline,
    tree_seconds,
    two_level_seconds,
)
from common.ring_sim import simulate_reduce_then_broadcast, simulate_ring_all_reduce

LINK = Link(alpha=1e-4, bandwidth=1e9)


@pytest.mark.parametrize("world_size", [2, 3, 4, 5, 8])
def test_the_ring_formula_counts_the_simulated_ring_s_messages_and_bytes(world_size):
    elements = 12 * world_size  # float32, divisible by N: every chunk the same size
    inputs = [torch.randn(elements) for _ in range(world_size)]
    record = simulate_ring_all_reduce(inputs)
    steps = len(record.steps) - 1  # the first is the start
    # Every step each rank sends one message, all ranks at once: a step costs one
    # message's alpha and its bytes' beta.
    assert all(len(step.transfers) == world_size for step in record.steps[1:])
    sent = max(record.elements_sent()) * 4
    expected = steps * LINK.alpha + sent * LINK.beta
    assert ring_seconds(elements * 4, world_size, LINK) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("world_size", [2, 3, 5])
def test_reduce_then_broadcast_pays_every_message_through_the_root(world_size):
    elements = 10
    record = simulate_reduce_then_broadcast([torch.randn(elements) for _ in range(world_size)])
    root_messages = sum(
        1 for step in record.steps for t in step.transfers if 0 in (t.sender, t.receiver)
    )
    assert root_messages == 2 * (world_size - 1)
    expected = root_messages * (LINK.alpha + elements * 4 * LINK.beta)
    assert reduce_broadcast_seconds(elements * 4, world_size, LINK) == pytest.approx(expected)


def test_the_tree_s_latency_grows_with_log_n_and_the_ring_s_with_n():
    small = 1024  # latency-bound
    assert tree_seconds(small, 1024, LINK) == pytest.approx(20 * LINK.alpha + 2 * small * LINK.beta)
    assert ring_seconds(small, 1024, LINK) > 20 * tree_seconds(small, 1024, LINK)
    big = 2**30  # bandwidth-bound: the two move about the same bytes per link
    assert (
        ring_seconds(big, 8, LINK) < tree_seconds(big, 8, LINK) < 1.2 * ring_seconds(big, 8, LINK)
    )
    assert ring_seconds(big, 1, LINK) == tree_seconds(big, 1, LINK) == 0


def test_a_two_level_ring_of_one_machine_is_a_ring():
    fast, slow = Link(1e-6, 1e11), Link(1e-5, 1e10)
    assert two_level_seconds(2**20, 8, 1, fast, slow) == ring_seconds(2**20, 8, fast)
    # Across machines each of the 8 rings carries 1/8 of the tensor.
    across = two_level_seconds(2**20, 8, 4, fast, slow) - ring_seconds(2**20, 8, fast)
    assert across == pytest.approx(ring_seconds(2**20 / 8, 4, slow))


def benchmark_rows(link: Link, noise: float, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for world_size in (2, 3, 4):
        for exponent in range(12, 25, 2):
            seconds = ring_seconds(2**exponent, world_size, link)
            seconds *= 1 + rng.uniform(-noise, noise)
            rows.append({"bytes": 2**exponent, "world_size": world_size, "t": seconds})
    return rows


def test_the_fit_recovers_alpha_and_beta():
    truth = Link(alpha=3e-4, bandwidth=8e8)
    exact = fit_alpha_beta(benchmark_rows(truth, noise=0), "t")
    assert exact.alpha == pytest.approx(truth.alpha, rel=1e-9)
    assert exact.bandwidth == pytest.approx(truth.bandwidth, rel=1e-9)
    rows = benchmark_rows(truth, noise=0.1)
    noisy = fit_alpha_beta(rows, "t")
    assert noisy.alpha == pytest.approx(truth.alpha, rel=0.15)
    assert noisy.bandwidth == pytest.approx(truth.bandwidth, rel=0.15)


def test_the_fit_minimizes_relative_error():
    """The 4-process 16 and 64 MB rows are 20% slow: a plain least-squares fit follows
    them (their error is the largest in seconds) and misses the small sizes; the fit of
    least relative error is the minimum of the sum of squared relative errors."""
    truth = Link(alpha=3e-4, bandwidth=8e8)
    rows = [
        {
            "bytes": n,
            "world_size": w,
            "t": ring_seconds(n, w, truth) * (1.2 if n > 2**20 and w == 4 else 1),
        }
        for w in (2, 4)
        for n in (2**12, 2**16, 2**24, 2**26)
    ]
    fitted = fit_alpha_beta(rows, "t")

    def squared(link):
        return sum(e * e for e in relative_errors(rows, "t", link))

    for alpha, beta in ((1.01, 1), (0.99, 1), (1, 1.01), (1, 0.99)):
        assert squared(Link(fitted.alpha * alpha, fitted.bandwidth / beta)) > squared(fitted)


def test_the_fit_never_returns_a_negative_latency():
    # Times made with alpha = -10 us: a free fit would return it; no message is that fast.
    rows = [
        {"bytes": n, "world_size": w, "t": ring_seconds(n, w, Link(-1e-5, 1e9))}
        for w in (2, 4)
        for n in (2**20, 2**22, 2**24)
    ]
    link = fit_alpha_beta(rows, "t")
    assert link.alpha == 0
    assert link.bandwidth == pytest.approx(1e9, rel=0.05)


@pytest.mark.parametrize("seed", range(5))
def test_the_bucket_rule_is_ddp_s(seed):
    rng = random.Random(seed)
    numels = [rng.choice([10, 1000, 2**16, 2**18, 3 * 2**18]) for _ in range(40)]
    tensors = [torch.empty(n) for n in numels]
    for first, cap in ((2**20, 25 * 2**20), (2**20, 2**20), (2**19, 2**21)):
        theirs, _ = dist._compute_bucket_assignment_by_size(tensors, [first, cap])
        ours = assign_buckets([4 * n for n in numels], cap, first)
        assert ours == theirs


def test_the_timeline_starts_each_bucket_when_ready_and_after_the_previous():
    ready, sizes = [1.0, 2.0, 3.0, 4.0], [100, 100, 100, 100]

    def cost(nbytes):
        return nbytes / 100  # one second per gradient of 100 bytes

    timeline = step_timeline(0.5, ready, sizes, 4.0, 0.25, [[0, 1], [2], [3]], cost)
    # Bucket 0 waits for gradient 1 (t=2) and takes 2 s; bucket 1 is ready at 3 but the
    # stream is busy until 4; bucket 2 then starts at 5.
    assert timeline.buckets == [(2.0, 4.0, 200), (4.0, 5.0, 100), (5.0, 6.0, 100)]
    assert timeline.exposed_communication == 2.0
    assert timeline.step == 0.5 + 4.0 + 2.0 + 0.25
    serial = step_timeline(0.5, ready, sizes, 4.0, 0.25, [[0, 1], [2], [3]], cost, overlap=False)
    assert serial.buckets == [(4.0, 6.0, 200), (6.0, 7.0, 100), (7.0, 8.0, 100)]
    assert serial.step == 0.5 + 4.0 + 4.0 + 0.25
    free = step_timeline(0.5, ready, sizes, 4.0, 0.25, [[0, 1, 2, 3]], lambda n: 0.0)
    assert free.step == free.compute == 4.75


def test_the_gpt_shapes_count_as_lesson_05_s_model():
    model_py = lesson_module("05_mingpt", "model")
    efficiency = lesson_module("05_mingpt", "efficiency")
    for gpt in (at_scale.GPT_125M, at_scale.GPT_1_3B):
        shape = model_py.GPTShape(vocab_size=gpt.vocabulary, block_size=gpt.context,
                                  n_layer=gpt.layers, n_head=16, n_embd=gpt.width,
                                  tie_weights=True)  # fmt: skip
        with torch.device("meta"):
            model = model_py.GPT(shape)
        assert gpt.parameters == sum(p.numel() for p in model.parameters())
        assert gpt.flops_per_token == efficiency.model_flops_per_token(model, gpt.context)
        block = sum(p.numel() for p in model.blocks[0].parameters())
        assert gpt.layer_parameters == block
        _, sizes = at_scale.gradient_arrivals(gpt, 1.0)
        assert sum(sizes) == 4 * gpt.parameters


def test_predictions_move_the_way_the_model_says():
    ib, ethernet = at_scale.NETWORKS.values()
    gpt = at_scale.GPT_125M
    for gpus in at_scale.gpu_counts():
        fast = at_scale.predict(gpt, gpus, ib)[1]
        slow = at_scale.predict(gpt, gpus, ethernet)[1]
        accumulated = at_scale.predict(gpt, gpus, ethernet, accumulation=8)[1]
        assert 0 < slow <= fast <= 1
        assert slow < accumulated <= 1
    # Inside one machine the all-reduce almost hides (the embeddings' gradients come
    # last: their bucket cannot); across Ethernet it cannot.
    inside = at_scale.predict(gpt, 8, ethernet)[0]
    assert 0 < inside.exposed_communication < 0.05 * inside.step
    assert at_scale.predict(gpt, 64, ethernet)[1] < 0.5
    # Latency: at 1,024 GPUs small buckets cost what big ones do not.
    small = at_scale.predict(gpt, 1024, ib, bucket_cap_mb=1)[1]
    assert small < at_scale.predict(gpt, 1024, ib, bucket_cap_mb=25)[1] - 0.2


def test_the_published_comparison_reads_the_model_not_the_figures():
    # The model's ResNet-50 step grows with GPUs only by the communication it exposes.
    one, sixteen = at_scale.resnet50_step(1), at_scale.resnet50_step(16)
    assert one.step == at_scale.PUBLISHED["1 GPU, no DDP"]
    assert sixteen.step == pytest.approx(one.step + sixteen.exposed_communication)
    assert 0 < sixteen.exposed_communication < 0.01 * one.step


def test_each_measurement_keeps_its_quickest_round():
    first = [{"world_size": 2, "bytes": 8, "t": 3.0}, {"world_size": 2, "bytes": 64, "t": 1.0}]
    second = [{"world_size": 2, "bytes": 8, "t": 2.0}, {"world_size": 2, "bytes": 64, "t": 5.0}]
    kept = cost_model.quickest_rows(first + second, same=("world_size", "bytes"), seconds_key="t")
    assert kept == [second[0], first[1]]  # in the order first measured, each its quickest
