"""The benchmark scripts still run, each once at tiny settings: their figures depend on the
machine, so only what holds on any machine is checked (a row per configuration, every
derived figure computed from the printed ones)."""

import os
import re

import pytest
from conftest import REPO

from common.launch import run


def benchmark(command: str, tmp_path) -> str:
    """`python <lesson script> <arguments>`, run from a folder of its own."""
    return run(f"python {REPO / command}", cwd=tmp_path, quiet=True, timeout=400)


def test_02_benchmark_scaling_has_a_row_per_configuration_and_true_speed_ups(tmp_path):
    output = benchmark(
        "02_multigpu/benchmark_scaling.py --processes 2 --threads 2 --samples 1024 "
        "--epochs 2 --width 64 --batch_size 128",
        tmp_path,
    )
    rows = re.findall(r"^ +(\d+) +(\d+) +([\d.]+) +([\d.]+)x$", output, re.M)
    # 1 process (the baseline), 2 processes, then, on the CPU only (conftest's DDP_DEVICE,
    # unless one was set), 1 process with 2 threads.
    rival = [("1", "2")] if os.environ["DDP_DEVICE"] == "cpu" else []
    assert [(processes, threads) for processes, threads, _, _ in rows] == [
        ("1", "1"),
        ("2", "1"),
        *rival,
    ], output
    seconds = [float(row[2]) for row in rows]
    for row, epoch in zip(rows, seconds, strict=True):
        # Seconds are printed to 1 ms: the speed-up recomputed from them is near.
        assert float(row[3]) == pytest.approx(seconds[0] / epoch, rel=0.1, abs=0.01), row


def test_03_measure_recovery_prints_both_tables(tmp_path):
    output = benchmark(
        "03_fault_tolerance/measure_recovery.py --intervals 0.1 --save_every 5", tmp_path
    )
    # Table 1: death -> noticed -> new workers up -> resumed -> epoch redone, in order.
    restart = re.search(r"^ +0\.1 +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+)$", output, re.M)
    times = [float(value) for value in restart.groups()]
    assert times == sorted(times) and times[-1] > 0, restart[0]
    # Table 2: rank 1 killed once epoch 18 is logged, so in epoch 19 (or, when the kill
    # lands late, a later one). With a snapshot every 5 epochs the last one before it
    # holds epochs 0-14 (as a rule): training goes on at 15 and redoes epochs 15-18.
    per_epoch = float(re.search(r"; ([\d.]+) s per epoch;", output)[1])
    lost = re.search(r"^ +5 +(\d+) +(\d+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+)$", output, re.M)
    assert lost is not None, output[-2000:]
    killed, resumed_at, redone, redone_seconds, _, average = lost.groups()
    assert int(killed) >= 19 and int(resumed_at) % 5 == 0, lost[0]
    assert 15 <= int(resumed_at) <= int(killed), lost[0]
    assert (float(redone), float(average)) == (int(killed) - int(resumed_at), 2.5)
    assert float(redone_seconds) == pytest.approx(float(redone) * per_epoch, abs=0.01)


def test_05_benchmark_throughput_ratio_is_two_over_one(tmp_path):
    output = benchmark(
        "05_mingpt/benchmark.py throughput --steps 8 --batch_size 2 --repeats 1", tmp_path
    )
    speeds = dict(
        re.findall(r"^(\d) process\(es\), 1 thread each: ([\d,]+) tokens/s", output, re.M)
    )
    assert speeds.keys() == {"1", "2"}, output
    one, two = (int(speeds[n].replace(",", "")) for n in ("1", "2"))
    ratio = float(re.search(r"speed-up of 2 DDP processes over 1: ([\d.]+)x", output)[1])
    assert ratio == pytest.approx(two / one, abs=0.006)
    assert f"speed-up, median of 1: {ratio:.2f}x ({ratio:.2f}x; target >= 1.6x)" in output
