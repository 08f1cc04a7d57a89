"""Lesson 01: the scripts the notebook launches, run with torchrun as a learner would.
Each test parses what the script printed and checks it independently of the script's
own checks."""

import re

import pytest
import torch
import torch.distributed as dist
from conftest import REPO, lesson_module, one_worker_environment

from common.launch import run
from common.ring_sim import simulate_ring_all_reduce

LESSON = REPO / "01_theory"


def torchrun(script, world_size, arguments, tmp_path):
    command = f"torchrun --standalone --nproc_per_node={world_size} {LESSON / script}"
    return run(f"{command} {arguments}", cwd=tmp_path, timeout=240, quiet=True)


def test_a_world_of_one_process_checks_the_ring_and_has_nothing_to_time(tmp_path):
    # A machine of one GPU runs a world of one (the GPU mode does): every awkward size is
    # still a tensor of at least one element, and the bus factor 2(N-1)/N is 0. The one
    # worker alone, with the environment torchrun gives it: no agent process to start.
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


@pytest.mark.parametrize("world_size", [2, 3, 4, 8])
def test_the_bus_factor_is_what_each_rank_sends_in_the_ring(world_size):
    ring_allreduce = lesson_module("01_theory", "ring_allreduce")
    numel = 840  # divisible by every world size here: equal chunks
    sent = simulate_ring_all_reduce([torch.ones(numel)] * world_size).elements_sent()
    assert ring_allreduce.bus_factor(world_size) == pytest.approx(sent[0] / numel)


def test_ddp_equals_one_process_and_the_hand_written_all_reduce_at_world_3(tmp_path):
    world_size = 3  # the notebook runs 2
    output = torchrun("ddp_replicas.py", world_size, "--epochs 1", tmp_path)
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
    """ddp_buckets.py's own recording, in a world of one in this process (the buckets do
    not depend on the world's size). The buckets per cap, their sizes and launch order
    are lesson 01's check cell's, on the events of the notebook's 2-process launch."""
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
