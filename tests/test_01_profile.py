"""Lesson 01's `trace_reader.py` on traces written here, known to the microsecond, and on
a real `ddp_profile.py` launch of plain DDP(model)."""

import json
import math

import pytest
from conftest import REPO, lesson_module

from common.launch import run

reader = lesson_module("01_theory", "trace_reader")
MAIN, WORKER = 100, 101  # thread ids: the main thread, a gloo worker
LAYER = 512 * 512 + 512  # ddp_profile.py's default layer: elements of weight and bias


def event(name, ts, dur, tid=MAIN, **args):
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "tid": tid, "pid": 1, "args": args}


def backward(ts, dur):
    return event(reader.BACKWARD + "AddmmBackward0", ts, dur)


def all_reduce(launched, started, ended, numel=LAYER):
    """DDP's launch on the main thread, and gloo's run on a worker."""
    ran = event(reader.ALL_REDUCE, started, ended - started, WORKER, **{"Input Dims": [[numel]]})
    return [event(reader.LAUNCH, launched, 1, **{"Input Dims": [[[numel]], [], []]}), ran]


def read(tmp_path, events):
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": [event("ProfilerStep#2", 0, 1000), *events]}))
    return reader.read_steps(path)


def test_covered_counts_overlapping_intervals_once():
    intervals = [(0, 10), (5, 15), (20, 25)]
    assert reader.covered(intervals, -math.inf, math.inf) == 20
    assert reader.covered(intervals, 8, 22) == 2 + 5 + 2
    assert reader.covered(intervals, 15, 20) == 0


def test_a_bucket_sent_during_backward_is_hidden_until_backward_ends(tmp_path):
    # Backward computes from 10 to 50 µs. Bucket 0 runs 23..60: 27 µs hidden, 10 exposed;
    # bucket 1, queued behind it, runs 60..80: exposed.
    events = [backward(10, 20), backward(30, 20), event(reader.GRADIENT, 20, 2)]
    events += all_reduce(22, 23, 60) + all_reduce(48, 60, 80, numel=7 * LAYER)
    (step,) = read(tmp_path, events)
    assert (step.backward_started, step.backward_ended) == (10, 50)
    assert [(b.launched, b.started, b.ended) for b in step.buckets] == [(22, 23, 60), (48, 60, 80)]
    assert [round(b.megabytes, 3) for b in step.buckets] == [1.002, 7.014]
    assert step.gradients == [22]
    assert (step.communication(), step.hidden(), step.exposed()) == (57, 27, 30)


def test_the_end_of_backward_is_its_last_autograd_event_not_the_step_s(tmp_path):
    # DDP waits for every bucket inside backward(): the main thread's later events (the
    # copies back to .grad, the optimizer) are not the backward pass's compute.
    events = [backward(10, 40), event("Optimizer.step#SGD.step", 90, 5)]
    events += [event("torch.distributed.ddp.reducer::copy_bucket_to_grad", 85, 2)]
    events += all_reduce(45, 46, 80)
    (step,) = read(tmp_path, events)
    assert step.backward_ended == 50 and step.exposed() == 30


def test_unmatched_launches_and_gpu_traces_are_refused(tmp_path):
    lonely = [backward(10, 40), event(reader.LAUNCH, 20, 1, **{"Input Dims": [[[4]]]})]
    with pytest.raises(ValueError, match="1 launches, 0 runs"):
        read(tmp_path, lonely)
    kernel = {**event("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 20, 5), "cat": "kernel"}
    with pytest.raises(ValueError, match="read it with HTA"):
        read(tmp_path, [backward(10, 40), kernel])


def test_hand_timed_events_are_compared_bucket_by_bucket(tmp_path):
    events = [backward(10, 40)] + all_reduce(20, 21, 60) + all_reduce(40, 60, 90)
    (step,) = read(tmp_path, events)
    # The hooks' clock: seconds, 5 s ahead of the trace's, launches read 10 µs earlier.
    hand = [
        {"kind": "bucket_launch", "index": k, "numel": LAYER, "time": 5 + t, "done": 5 + d}
        for k, (t, d) in enumerate([(10e-6, 50e-6), (30e-6, 81e-6)])
    ]
    differences = reader.hand_timed_differences(step, hand)
    assert differences == pytest.approx([0, 0, 0, 0.001], abs=1e-6)  # ms
    with pytest.raises(ValueError, match="out of index order"):
        reader.hand_timed_differences(step, [{**hand[0], "index": 1}, {**hand[1], "index": 0}])
    with pytest.raises(ValueError, match="hand-timed buckets"):
        reader.hand_timed_differences(step, [hand[0], {**hand[1], "numel": 2 * LAYER}])


def test_plain_ddp_s_trace_reads_as_its_two_buckets_launched_during_the_backward(tmp_path):
    # Plain DDP(model) (no hooks, unlike the notebook's launch): two buckets, the last layer
    # first. That none is hidden with overlap off: lesson 01's check cell, on its launch.
    script = REPO / "01_theory" / "ddp_profile.py"
    output = run(
        f"torchrun --standalone --nproc_per_node=2 {script} --bucket-cap-mb default "
        f"--steps 2 --out {tmp_path}",
        cwd=tmp_path,
        timeout=240,
        quiet=True,
    )
    assert "gpuGetDeviceCount" not in output  # quieted on the CPU
    assert output.count("ms with the profiler") == 2, output
    for rank in (0, 1):
        overlap = reader.read_steps(tmp_path / "overlap" / f"rank{rank}.json")
        assert [step.name for step in overlap] == ["ProfilerStep#2", "ProfilerStep#3"]
        for step in overlap:
            assert [round(b.megabytes, 3) for b in step.buckets] == [1.002, 7.014], step
            # launched during the backward, whatever the load (when gloo runs it: the cores')
            assert min(bucket.launched for bucket in step.buckets) < step.backward_ended, step
        for step in reader.read_steps(tmp_path / "after_backward" / f"rank{rank}.json"):
            assert [round(b.megabytes, 3) for b in step.buckets] == [8.016], step
