"""The alpha-beta cost model (`01_theory/cost_model.py`): each formula against what it
models, the fit and the checks on data made from known cost models, right and wrong."""

import random

import pytest
import torch
import torch.distributed as dist
from conftest import lesson_module

from common.ring_sim import simulate_reduce_then_broadcast, simulate_ring_all_reduce

cost_model = lesson_module("01_theory", "cost_model")
machine_load = lesson_module("01_theory", "machine_load")
Link, fit_alpha_beta = cost_model.Link, cost_model.fit_alpha_beta
ring_seconds, tree_seconds = cost_model.ring_seconds, cost_model.tree_seconds
reduce_broadcast_seconds = cost_model.reduce_broadcast_seconds

LINK = Link(alpha=1e-4, bandwidth=1e9)


@pytest.mark.parametrize("world_size", [2, 3, 4, 5, 8])
def test_the_ring_formula_counts_the_simulated_ring_s_messages_and_bytes(world_size):
    elements = 12 * world_size  # float32, divisible by N: every chunk the same size
    inputs = [torch.randn(elements) for _ in range(world_size)]
    record = simulate_ring_all_reduce(inputs)
    # Every step (the first is the start) each rank sends one message, all at once: a
    # step costs one message's alpha and its bytes' beta.
    assert all(len(step.transfers) == world_size for step in record.steps[1:])
    expected = (len(record.steps) - 1) * LINK.alpha + max(record.elements_sent()) * 4 * LINK.beta
    assert ring_seconds(elements * 4, world_size, LINK) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("world_size", [2, 3, 5])
def test_reduce_then_broadcast_pays_every_message_through_the_root(world_size):
    elements = 10
    record = simulate_reduce_then_broadcast([torch.randn(elements) for _ in range(world_size)])
    transfers = [t for step in record.steps for t in step.transfers]
    root_messages = sum(0 in (t.sender, t.receiver) for t in transfers)
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
    assert cost_model.two_level_seconds(2**20, 8, 1, fast, slow) == ring_seconds(2**20, 8, fast)
    # Across machines each of the 8 rings carries 1/8 of the tensor.
    across = cost_model.two_level_seconds(2**20, 8, 4, fast, slow) - ring_seconds(2**20, 8, fast)
    assert across == pytest.approx(ring_seconds(2**20 / 8, 4, slow))


SIZES = [4**k * 2**12 for k in range(8)]  # 4 KB to 64 MB, the benchmark's sizes


def made_by(cost, noise: float = 0.05, seed: int = 0, worlds=(2, 4)) -> list[dict]:
    """Benchmark rows timed by `cost(bytes, world_size)`, each off by up to +-`noise`."""
    rng = random.Random(seed)
    return [{"bytes": n, "world_size": w, "t": cost(n, w) * (1 + rng.uniform(-noise, noise))}
            for w in worlds for n in SIZES]  # fmt: skip


def test_the_fit_recovers_alpha_and_beta():
    truth = Link(alpha=3e-4, bandwidth=8e8)
    for noise, rel in ((0, 1e-9), (0.1, 0.15)):
        rows = made_by(lambda n, w: ring_seconds(n, w, truth), noise=noise, worlds=(2, 3, 4))
        fitted = fit_alpha_beta(rows, "t")
        assert fitted.alpha == pytest.approx(truth.alpha, rel=rel)
        assert fitted.bandwidth == pytest.approx(truth.bandwidth, rel=rel)


def test_the_fit_minimizes_relative_error():
    """The 4-process 16 and 64 MB rows are 20% slow: a plain least-squares fit would follow
    them (the largest errors in seconds) and miss the small sizes."""
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
        return sum(e * e for e in cost_model.relative_errors(rows, "t", link))

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
        assert cost_model.assign_buckets([4 * n for n in numels], cap, first) == theirs


def test_the_timeline_starts_each_bucket_when_ready_and_after_the_previous():
    def timeline(buckets, cost=lambda nbytes: nbytes / 100, **overlap):  # 1 s per 100 bytes
        return cost_model.step_timeline(
            0.5, [1.0, 2.0, 3.0, 4.0], [100] * 4, 4.0, 0.25, buckets, cost, **overlap
        )

    # Bucket 0 waits for gradient 1 (t=2) and takes 2 s; bucket 1 is ready at 3 but the
    # stream is busy until 4; bucket 2 then starts at 5.
    overlapped = timeline([[0, 1], [2], [3]])
    assert overlapped.buckets == [(2.0, 4.0, 200), (4.0, 5.0, 100), (5.0, 6.0, 100)]
    assert overlapped.exposed_communication == 2.0
    assert overlapped.step == 0.5 + 4.0 + 2.0 + 0.25
    serial = timeline([[0, 1], [2], [3]], overlap=False)
    assert serial.buckets == [(4.0, 6.0, 200), (6.0, 7.0, 100), (7.0, 8.0, 100)]
    assert serial.step == 0.5 + 4.0 + 4.0 + 0.25
    free = timeline([[0, 1, 2, 3]], lambda n: 0.0)
    assert free.step == free.compute == 4.75


# The on-machine checks, fed data made from cost models: the ring's must pass, every
# wrong one must fail one check at least. alpha and bandwidth as gloo's on a laptop.
TRUTH = Link(alpha=2e-4, bandwidth=1.5e9)


RING = (lambda n, w: ring_seconds(n, w, TRUTH), None)  # None: no check may fail it
WRONG_MODELS = {
    "reduce then broadcast": (lambda n, w: reduce_broadcast_seconds(n, w, TRUTH), "world size"),
    "tree": (lambda n, w: tree_seconds(n, w, TRUTH), "world size"),
    "constant in the world size": (lambda n, w: ring_seconds(n, 2, TRUTH), "world size"),
    "constant time": (lambda n, w: 5e-3, "sizes"),
}


@pytest.mark.parametrize("name", ["ring", *WRONG_MODELS])
def test_the_checks_pass_the_ring_s_data_and_fail_a_wrong_cost_model_s(name):
    cost, caught_by = WRONG_MODELS.get(name, RING)
    for seed in range(5):
        rows = made_by(cost, seed=seed)
        checks = {
            "sizes": cost_model.check_held_out_sizes(rows, "t").passed,
            "world size": cost_model.check_world_size(rows, "t").passed,
        }
        if caught_by is None:
            assert checks == {"sizes": True, "world size": True}, seed
        else:
            assert not checks[caught_by], (name, seed)


def step_rows(all_reduce_factor: float, seed: int = 0) -> list[dict]:
    """ddp_step_times.py's rows (2 processes, 8 layers of 2.3 MB), timed by the no-overlap
    model with all-reduces `all_reduce_factor` times the ring's."""
    rng = random.Random(seed)
    sizes = [4 * (768 * 768 + 768)] * 8
    rows = []
    for cap, buckets in ((1, [[7], [6], [5], [4], [3], [2], [1], [0]]), (25, [list(range(8))])):
        compute = {"forward": 0.015, "backward": 0.03, "optimizer": 0.002, "step": 0.047}
        row = {"world_size": 2, "bucket_cap_mb": cap, "sizes": sizes, "buckets": buckets,
               "ready": [0.03 - 0.003 * i for i in range(8)], "compute": compute}  # fmt: skip
        step = compute["step"]
        if all_reduce_factor:
            slower = Link(TRUTH.alpha * all_reduce_factor, TRUTH.bandwidth / all_reduce_factor)
            step = cost_model.predict_measured_step(row, slower, overlap=False).step
        rows.append(row | {"step": step * (1 + rng.uniform(-0.05, 0.05))})
    return rows


def test_the_step_check_passes_the_model_s_own_steps_and_fails_others():
    for seed in range(5):
        assert cost_model.check_steps(step_rows(1.0, seed), TRUTH, False, 0.0).passed
        # No communication at all: the null model explains them, the model cannot win.
        assert not cost_model.check_steps(step_rows(0.0, seed), TRUTH, False, 0.0).passed
        # All-reduces three times the ring's (reduce then broadcast, 4 ranks, bandwidth).
        assert not cost_model.check_steps(step_rows(3.0, seed), TRUTH, False, 0.0).passed


def test_quiet_means_other_programs_left_the_cores_alone():
    record = machine_load.LoadRecord()
    record.runs = [("a", 0.5, 0.05), ("b", 2.5, 0.1)]
    assert record.quiet  # the load average counts our own processes: not what decides
    record.runs.append(("c", 0.1, 1.0))
    assert not record.quiet and record.busiest == 1.0 and "busy" in record.table()


def test_interpolating_between_two_fitted_worlds_cannot_tell_a_ring():
    """Why the world-size check extrapolates: fitted on 2 and 4 processes, the ring's formula
    predicts a tree's 3-process times, or times the world size leaves alone, within bound."""
    for name in ("tree", "constant in the world size"):
        cost = WRONG_MODELS[name][0]
        rows = made_by(cost, noise=0, worlds=(2, 3, 4))
        link = fit_alpha_beta([r for r in rows if r["world_size"] != 3], "t")
        big = [r for r in rows if r["world_size"] == 3 and r["bytes"] >= 2**20]
        errors = sorted(abs(e) for e in cost_model.relative_errors(big, "t", link))
        assert errors[len(errors) // 2] < cost_model.BOUND, name
