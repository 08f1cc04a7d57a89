"""Lesson 01: the scripts the notebook launches, run with torchrun as a learner would.
Each test parses what the script printed and checks it independently of the script's
own checks."""

import ast
import json
import re
import subprocess
from collections import Counter

import pytest
from conftest import PYTHON, REPO

from common.launch import run

LESSON = REPO / "01_theory"


def torchrun(script, world_size, arguments="", tmp_path=None, timeout=240):
    return run(
        f"torchrun --standalone --nproc_per_node={world_size} {LESSON / script} {arguments}",
        cwd=tmp_path,
        timeout=timeout,
        quiet=True,
    )


def table(output, name):
    """{rank: (before, after)} from the tour's table for `name`."""
    section = output.split(f"== {name}:")[1].split("==")[0]
    rows = {}
    for line in section.splitlines()[2:]:
        match = re.match(r"\[rank0\]\s+(\d+)  (.*?)  +(\S.*)$", line)
        if match:
            before = match[2].strip()
            rows[int(match[1])] = (before, ast.literal_eval(match[3]))
    return rows


def test_collectives_tour_shows_what_each_collective_does(tmp_path):
    output = torchrun("collectives_tour.py", 3, tmp_path=tmp_path)
    assert "every result is what the operation promises (3 ranks)" in output
    assert {rank: after for rank, (_, after) in table(output, "all_reduce").items()} == {
        0: [6, 60],
        1: [6, 60],
        2: [6, 60],
    }
    assert table(output, "broadcast")[2][1] == [1, 10]
    assert table(output, "all_gather")[1][1] == [[1, 10], [2, 20], [3, 30]]
    assert [table(output, "reduce_scatter")[r][1] for r in range(3)] == [[6], [60], [600]]
    assert [table(output, "isend_irecv")[r][1] for r in range(3)] == [[3, 30], [1, 10], [2, 20]]
    assert [table(output, "all_to_all")[r][1] for r in range(3)] == [
        [[0], [10], [20]],
        [[1], [11], [21]],
        [[2], [12], [22]],
    ]
    assert table(output, "reduce")[0][1] == [6, 60]


def test_ring_allreduce_script_checks_and_benchmarks(tmp_path):
    out = tmp_path / "bench.json"
    output = torchrun(
        "ring_allreduce.py",
        2,
        f"--max-size 64KB --repeats 2 --straightforward --out {out}",
        tmp_path=tmp_path,
    )
    assert "the ring equals dist.all_reduce on 2 ranks: every size, every dtype" in output
    sizes = {1, 2, 3, 5, 1000, 100_003}
    assert output.count("ring == all_reduce") == 6 * len(sizes)
    rows = json.loads(out.read_text())
    assert [row["bytes"] for row in rows] == [4096, 16384, 65536]
    for row in rows:
        for name in ("all_reduce", "ring", "straightforward"):
            assert row[f"{name}_algbw"] == pytest.approx(
                row["bytes"] / row[f"{name}_seconds"] / 1e9
            )
            assert row[f"{name}_busbw"] == pytest.approx(row[f"{name}_algbw"] * 2 * 1 / 2)
        assert row["ratio"] == pytest.approx(row["ring_busbw"] / row["all_reduce_busbw"])


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


def test_sampler_shards_are_disjoint_cover_and_pad(tmp_path):
    output = torchrun("sampler_indices.py", 3, "--dataset_size 12", tmp_path=tmp_path)
    sections = {}
    for block in output.split("== ")[1:]:
        title = block.splitlines()[0]
        epochs = re.findall(r"epoch (\d+) \| (.*)", block)
        sections[title] = [
            [ast.literal_eval(s) for s in re.findall(r"rank \d+: (\[[^\]]*\])", row)]
            for _, row in epochs
        ]
    shuffled = sections["12 samples, shuffle=True, set_epoch(epoch) each epoch"]
    for shards in shuffled:
        assert sorted(i for shard in shards for i in shard) == list(range(12))  # disjoint, cover
    assert shuffled[0] != shuffled[1]
    forgotten = sections["12 samples, shuffle=True, set_epoch never called"]
    assert forgotten[0] == forgotten[1] == shuffled[0]
    padded = sections["13 samples, shuffle=False: padded with the first indices"][0]
    counts = Counter(i for shard in padded for i in shard)
    assert set(counts) == set(range(13)) and [len(s) for s in padded] == [5, 5, 5]
    assert sorted(i for i, n in counts.items() if n == 2) == [0, 1]  # 15 - 13 repeated
    dropped = sections["13 samples, drop_last=True"][0]
    flat = [i for shard in dropped for i in shard]
    assert len(flat) == len(set(flat)) == 12


def test_bucket_count_follows_bucket_cap_mb(tmp_path):
    out = tmp_path / "buckets.json"
    output = torchrun(
        "ddp_buckets.py", 2, f"--caps 1 2 25 --iterations 2 --out {out}", tmp_path=tmp_path
    )
    counts = dict(re.findall(r"bucket_cap_mb=(\S+): (\d+) buckets?", output))
    assert counts == {"1": "8", "2": "4", "25": "1"}
    events = json.loads(out.read_text())
    for cap, buckets in (("1.0", 8), ("2.0", 4), ("25.0", 1)):
        launches = [e for e in events[cap] if e["kind"] == "bucket_launch"]
        ready = [e for e in events[cap] if e["kind"] == "grad_ready"]
        assert sorted(e["index"] for e in launches) == list(range(buckets))
        assert len(ready) == 16  # 8 layers x (weight, bias), each hook once
        assert sum(e["numel"] for e in launches) == 8 * (512 * 512 + 512)
        assert all(e["time"] < e["done"] for e in launches)
    # Hooks fire last layer first; with small buckets, sending starts before backward ends.
    order = [int(e["name"].split(".")[0]) for e in events["1.0"] if e["kind"] == "grad_ready"]
    assert order == sorted(order, reverse=True)
    first_launch = min(e["time"] for e in events["1.0"] if e["kind"] == "bucket_launch")
    assert first_launch < max(e["time"] for e in events["1.0"] if e["kind"] == "grad_ready")


@pytest.mark.parametrize(
    "script,arguments,message",
    [
        ("ring_allreduce.py", ["--max-size", "3XB"], "is not a size such as 4KB"),
        ("ddp_buckets.py", ["--caps", "0"], "caps must be positive"),
    ],
)
def test_bad_arguments_get_one_line(script, arguments, message, tmp_path):
    result = subprocess.run(
        [PYTHON, LESSON / script, *arguments], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and message in result.stderr
    assert "launch it as: torchrun" in result.stderr


@pytest.mark.parametrize(
    "script",
    [
        "collectives_tour.py",
        "ring_allreduce.py",
        "ddp_replicas.py",
        "sampler_indices.py",
        "ddp_buckets.py",
    ],
)
def test_plain_python_says_how_to_launch_it(script, tmp_path):
    result = subprocess.run([PYTHON, LESSON / script], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert f"{script} must be started by torchrun" in result.stderr
    assert "launch it as: torchrun --standalone --nproc_per_node=" in result.stderr
