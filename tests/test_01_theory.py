"""Lesson 01's scripts as a learner launches them, what they print read independently of
their own checks, in worlds the notebook does not run."""

import re

import torch
import torch.distributed as dist
from conftest import REPO, lesson_module, one_worker_environment

from common.launch import run

LESSON = REPO / "01_theory"


def test_a_world_of_one_process_checks_the_ring_and_has_nothing_to_time(tmp_path):
    # The GPU mode's world on a machine of one GPU: every awkward size is still at least
    # one element, and the bus factor 2(N-1)/N is 0. The worker alone: no agent to start.
    output = run(
        f"python {LESSON / 'ring_allreduce.py'} --max-size 16KB --repeats 1",
        cwd=tmp_path,
        env=one_worker_environment(),
        timeout=240,
        quiet=True,
    )
    checked = re.findall(r"check numel=(\d+) dtype=\w+: ring == all_reduce", output)
    assert {int(numel) for numel in checked} == {1, 2, 3, 1000, 100_003}
    assert "no benchmark: a world of 1 process sends nothing" in output


def test_ddp_equals_one_process_and_the_hand_written_all_reduce_at_world_3(tmp_path):
    world_size = 3  # the notebook runs 2
    command = f"torchrun --standalone --nproc_per_node={world_size} {LESSON / 'ddp_replicas.py'}"
    output = run(f"{command} --epochs 1", cwd=tmp_path, timeout=240, quiet=True)
    before = re.findall(r"before DDP\(model\): (.*)", output)
    after = re.findall(r"after  DDP\(model\): (.*)", output)
    assert len(set(before)) == world_size, "the replicas must start different"
    assert len(after) == world_size and len(set(after)) == 1, "and end equal"
    found = re.search(
        r"max \|DDP - one process\| = (\S+), max \|DDP - by hand\| = (\S+), "
        r"worst over every step = (\S+)",
        output,
    )
    assert all(float(value) < 1e-5 for value in found.groups()), found[0]
    losses = [float(x) for x in re.findall(r"epoch \d+: loss (\S+)", output)]
    assert len(losses) == 1 and losses[0] < 20


def test_the_recording_sees_each_gradient_once_and_every_parameter_in_a_bucket():
    """ddp_buckets.py's recording, in a world of one here (the buckets do not depend on
    its size); the buckets per cap and their order: lesson 01's check cell."""
    ddp_buckets = lesson_module("01_theory", "ddp_buckets")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        events = {
            cap: ddp_buckets.watch_one_backward(
                ddp_buckets.deep_model(8, 512), cap, torch.device("cpu"), 64, 2
            )[1]
            for cap in (None, 1.0, 2.0, 25.0)
        }
    finally:
        dist.destroy_process_group()
    for cap, recorded in events.items():
        launches = [e for e in recorded if e["kind"] == "bucket_launch"]
        ready = [e for e in recorded if e["kind"] == "grad_ready"]
        assert len(ready) == 16, cap  # 8 layers x (weight, bias), each hook once
        assert sum(e["numel"] for e in launches) == 8 * (512 * 512 + 512), cap
        assert all(e["time"] < e["done"] for e in launches), cap
        order = [int(e["name"].split(".")[0]) for e in ready]
        assert order == sorted(order, reverse=True), cap  # hooks fire last layer first
