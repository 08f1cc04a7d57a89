"""Lesson 01: the scripts the notebook launches, run with torchrun as a learner would.
Each test parses what the script printed and checks it independently of the script's
own checks."""

import ast
import json
import re

import pytest
import torch
import torch.distributed as dist
from conftest import REPO, lesson_module

from common.launch import run
from common.ring_sim import simulate_ring_all_reduce

LESSON = REPO / "01_theory"


def torchrun(script, world_size, arguments="", tmp_path=None, timeout=240):
    return run(
        f"torchrun --standalone --nproc_per_node={world_size} {LESSON / script} {arguments}",
        cwd=tmp_path,
        timeout=timeout,
        quiet=True,
    )


def test_the_tour_s_one_tensor_forms_equal_its_list_forms_at_world_4(tmp_path):
    # World 4, not the notebook's 3. The `_single` forms go under the names this PyTorch
    # has (all_gather_into_tensor and reduce_scatter_tensor are the older ones).
    output = torchrun("collectives_tour.py", 4, tmp_path=tmp_path)
    assert "every result is what the operation promises (4 ranks)" in output

    def after(name):
        section = output.split(f"== {name}:")[1].split("==")[0]
        rows = re.findall(r"^\[rank0\]\s+(\d+)  .*?  +(\S.*)$", section, re.MULTILINE)
        assert len(rows) == 4, section
        return [ast.literal_eval(value) for _, value in rows]

    def flat(per_rank):
        return [[value for piece in pieces for value in piece] for pieces in per_rank]

    def present(*names):
        return next(name for name in names if f"== {name}:" in output)

    assert after(present("all_gather_single", "all_gather_into_tensor")) == flat(
        after("all_gather")
    )
    assert after(present("reduce_scatter_single", "reduce_scatter_tensor")) == after(
        "reduce_scatter"
    )
    assert after("all_to_all_single") == flat(after("all_to_all"))
    assert after("all_to_all_single")[3] == [3, 13, 23, 33]  # piece 3 of every rank


def test_ring_allreduce_script_checks_and_benchmarks_at_world_3(tmp_path):
    # World 3, not the notebook's 2: at 2 every candidate bus factor (2(N-1)/N, N-1,
    # N/2, 1) is 1, so only a larger world shows the script uses the right one.
    out = tmp_path / "bench.json"
    output = torchrun(
        "ring_allreduce.py",
        3,
        f"--max-size 64KB --repeats 2 --straightforward --piece-size 4KB --out {out}",
        tmp_path=tmp_path,
    )
    assert "the ring equals dist.all_reduce on 3 ranks: every size, every dtype" in output
    assert re.search(r"load average [\d.]+ [\d.]+ [\d.]+ \(1, 5, 15 min\) on \d+ CPUs", output)
    assert "ring in pieces of 4KB" in output  # 64KB: chunks of about 21KB go in 6 pieces
    # Sizes around the world size (N-1, N, N+1, 2N+1) and large ones, in 6 dtypes.
    checked = re.findall(r"check numel=(\d+) dtype=(\w+): ring == all_reduce", output)
    assert {int(numel) for numel, _ in checked} == {1, 2, 3, 4, 7, 1000, 100_003}
    assert len(set(checked)) == len(checked) == 7 * 6
    # The factor is what a rank really sends, counted in the ring simulation: 4/3.
    sent = simulate_ring_all_reduce([torch.ones(3000) for _ in range(3)]).elements_sent()
    assert "busbw = algbw x 2(N-1)/N = algbw x 1.33" in output and sent == [4000] * 3
    rows = json.loads(out.read_text())
    assert [row["bytes"] for row in rows] == [4096, 16384, 65536]
    for row in rows:
        assert row["world_size"] == 3
        for name in ("all_reduce", "ring", "straightforward"):
            algbw = row[f"{name}_algbw"]
            assert algbw == pytest.approx(row["bytes"] / row[f"{name}_seconds"] / 1e9)
            assert row[f"{name}_busbw"] == pytest.approx(algbw * sent[0] / 3000)
        assert row["ratio"] == pytest.approx(row["ring_busbw"] / row["all_reduce_busbw"])


def test_a_world_of_one_process_checks_the_ring_and_has_nothing_to_time(tmp_path):
    # A machine of one GPU runs a world of one (the GPU mode does): every awkward size is
    # still a tensor of at least one element, and the bus factor 2(N-1)/N is 0.
    output = torchrun("ring_allreduce.py", 1, "--max-size 16KB --repeats 1", tmp_path=tmp_path)
    checked = re.findall(r"check numel=(\d+) dtype=\w+: ring == all_reduce", output)
    assert {int(numel) for numel in checked} == {1, 2, 3, 1000, 100_003}
    assert "no benchmark: a world of 1 process sends nothing" in output


@pytest.mark.parametrize("world_size", [2, 3, 4, 8])
def test_the_bus_factor_is_what_each_rank_sends_in_the_ring(world_size):
    ring_allreduce = lesson_module("01_theory", "ring_allreduce")
    numel = 840  # divisible by every world size here: equal chunks
    sent = simulate_ring_all_reduce([torch.ones(numel)] * world_size).elements_sent()
    assert ring_allreduce.bus_factor(world_size) == pytest.approx(sent[0] / numel)


@pytest.mark.parametrize("world_size", [3])  # the notebook runs 2
def test_ddp_equals_one_process_and_the_hand_written_all_reduce(world_size, tmp_path):
    output = torchrun("ddp_replicas.py", world_size, "--epochs 1", tmp_path=tmp_path)
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


def test_bucket_count_follows_bucket_cap_mb():
    """ddp_buckets.py's own recording, in a world of one in this process: the buckets
    do not depend on the world's size. (What the script prints of them, on 2 processes
    and every cap, lesson 01's check cell asserts on the notebook's launch.)"""
    ddp_buckets = lesson_module("01_theory", "ddp_buckets")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        events, first = {}, {}
        for cap in (None, 1.0, 2.0, 25.0):
            model = ddp_buckets.deep_model(8, 512)
            name = "default" if cap is None else f"{cap:g}"
            first[name], events[name] = ddp_buckets.watch_one_backward(
                model, cap, torch.device("cpu"), 64, 2
            )
    finally:
        dist.destroy_process_group()
    first_cap_mb = dist._DEFAULT_FIRST_BUCKET_BYTES / 2**20
    # The first iteration puts everything in one bucket; they are rebuilt after it.
    assert all(len(ddp_buckets.launches(events)) == 1 for events in first.values())
    for cap, buckets in (("default", 2), ("1", 8), ("2", 4), ("25", 1)):
        launches = sorted(
            (e for e in events[cap] if e["kind"] == "bucket_launch"), key=lambda e: e["time"]
        )
        ready = [e for e in events[cap] if e["kind"] == "grad_ready"]
        # Launched strictly in index order.
        assert [e["index"] for e in launches] == list(range(buckets))
        assert len(ready) == 16  # 8 layers x (weight, bias), each hook once
        assert sum(e["numel"] for e in launches) == 8 * (512 * 512 + 512)
        assert all(e["time"] < e["done"] for e in launches)
    first_bucket_mb = {}
    for cap in ("default", "25"):
        launches = [e for e in events[cap] if e["kind"] == "bucket_launch"]
        first_bucket_mb[cap] = next(e["numel"] for e in launches if e["index"] == 0) * 4 / 2**20
    # A bucket closes as soon as it reaches or passes its cap: the default's first bucket
    # holds the last layer only (1.002 MB, just past the 1 MB cap); an explicit cap of 25
    # caps the first bucket too, so it takes the whole 8 MB model.
    layer_mb = (512 * 512 + 512) * 4 / 2**20
    assert first_cap_mb < first_bucket_mb["default"] == layer_mb < first_bucket_mb["25"]
    # Hooks fire last layer first; with small buckets, sending starts before backward ends.
    order = [int(e["name"].split(".")[0]) for e in events["1"] if e["kind"] == "grad_ready"]
    assert order == sorted(order, reverse=True)
    first_launch = min(e["time"] for e in events["1"] if e["kind"] == "bucket_launch")
    assert first_launch < max(e["time"] for e in events["1"] if e["kind"] == "grad_ready")
