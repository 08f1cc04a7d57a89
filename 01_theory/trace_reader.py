"""Lesson 01: read back the torch.profiler traces that `ddp_profile.py` writes.

A Chrome trace is JSON: `traceEvents` is a list of events, and a complete event
(`"ph": "X"`) has a name, a thread (`tid`), a start `ts` and a duration `dur`, both in
microseconds. In a CPU trace of a DDP job on gloo, per profiled step:

- `ProfilerStep#N` on the main thread spans step N;
- the backward pass runs on the main thread as `autograd::engine::evaluate_function: ...`
  events, one per autograd node, `AccumulateGrad` among them (a gradient is ready);
- DDP launches a bucket's all-reduce from there: `c10d::allreduce_`, on the main thread;
- gloo runs it on one of its worker threads (`pt_gloo_runloop`): `gloo:all_reduce`, with
  the bucket's size in `Input Dims` when the profiler recorded shapes. The workers take
  queued all-reduces in order (ProcessGroupGloo keeps them in a queue), so the k-th to
  start is the k-th launched, but for two starting within microseconds of each other.

The backward pass's compute ends with its last autograd event. `backward()` returns
later: DDP waits there until every bucket's all-reduce is done. Communication after the
compute's end is exposed: no work hides it.

On a GPU the all-reduces are nccl kernels on a stream of their own: read those traces
with Holistic Trace Analysis (`hta.trace_analysis.TraceAnalysis`), not with this.
"""

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib.pyplot as plt

BACKWARD = "autograd::engine::evaluate_function: "
LAUNCH = "c10d::allreduce_"
ALL_REDUCE = "gloo:all_reduce"
GRADIENT = "torch::autograd::AccumulateGrad"


@dataclass
class Bucket:
    launched: float  # µs, on the trace's clock: c10d::allreduce_ began (main thread)
    started: float  # gloo:all_reduce began (a gloo worker thread)
    ended: float
    megabytes: float


@dataclass
class Step:
    name: str  # "ProfilerStep#2"
    backward_started: float  # µs: the first autograd event began
    backward_ended: float  # µs: the last autograd event ended (the compute, not backward())
    buckets: list[Bucket]
    gradients: list[float] = field(default_factory=list)  # µs: each AccumulateGrad ended

    def communication(self) -> float:
        """µs during which at least one all-reduce ran."""
        return covered([(b.started, b.ended) for b in self.buckets], -math.inf, math.inf)

    def hidden(self) -> float:
        """µs of all-reduce while the backward pass still computed."""
        intervals = [(b.started, b.ended) for b in self.buckets]
        return covered(intervals, self.backward_started, self.backward_ended)

    def exposed(self) -> float:
        """µs of all-reduce after the backward pass's compute ended."""
        return covered([(b.started, b.ended) for b in self.buckets], self.backward_ended, math.inf)


def covered(intervals: list[tuple[float, float]], low: float, high: float) -> float:
    """How much of [low, high] the union of `intervals` covers (overlaps count once)."""
    total, reached = 0.0, low
    for start, end in sorted(intervals):
        start, end = max(start, reached), min(end, high)
        if end > start:
            total += end - start
            reached = end
    return total


def megabytes(event: dict) -> float:
    """The size of the tensor an all-reduce event carried (float32), from its shapes."""
    dims = event["args"]["Input Dims"][0]
    if dims and isinstance(dims[0], list):  # c10d::allreduce_ takes a list of tensors
        dims = dims[0]
    return math.prod(dims) * 4 / 2**20


def read_steps(path: str | Path) -> list[Step]:
    """Every profiled step of one rank's trace, read as above."""
    events = [e for e in json.loads(Path(path).read_text())["traceEvents"] if e.get("ph") == "X"]
    if any(e.get("cat") == "kernel" and "nccl" in e["name"].lower() for e in events):
        raise ValueError(f"{path} is a GPU trace with nccl kernels: read it with HTA")
    steps = []
    for step in sorted((e for e in events if e["name"].startswith("ProfilerStep#")), key=start):
        main, begin, end = step["tid"], step["ts"], step["ts"] + step["dur"]
        inside = [e for e in events if begin <= e["ts"] <= end]
        backward = [e for e in inside if e["tid"] == main and e["name"].startswith(BACKWARD)]
        launches = sorted((e for e in inside if e["name"] == LAUNCH), key=start)
        runs = sorted((e for e in inside if e["name"] == ALL_REDUCE), key=start)
        if len(launches) != len(runs):
            raise ValueError(f"{path} {step['name']}: {len(launches)} launches, {len(runs)} runs")
        steps.append(
            Step(
                name=step["name"],
                backward_started=min(e["ts"] for e in backward),
                backward_ended=max(e["ts"] + e["dur"] for e in backward),
                buckets=[
                    Bucket(launch["ts"], run["ts"], run["ts"] + run["dur"], megabytes(run))
                    for launch, run in zip(launches, runs, strict=True)
                ],
                gradients=sorted(e["ts"] + e["dur"] for e in inside if e["name"] == GRADIENT),
            )
        )
    return steps


def start(event: dict) -> float:
    return event["ts"]


def draw_timelines(steps: dict[str, Step]):
    """One step of each job on a time axis from the start of its backward pass: a tick
    per gradient ready, a bar per all-reduce (gloo's worker), a dot where DDP launched
    it, and the end of the backward pass's compute; what lies right of it is exposed."""
    rows = [1 + len(step.buckets) for step in steps.values()]
    fig, axes = plt.subplots(
        len(steps),
        1,
        figsize=(8, 1.2 + 0.3 * sum(rows) + 0.6 * len(steps)),
        sharex=True,
        gridspec_kw={"height_ratios": rows},
        squeeze=False,
    )
    axes = axes[:, 0]
    palette = plt.get_cmap("tab10")
    for ax, (title, step) in zip(axes, steps.items(), strict=True):
        origin = step.backward_started

        def ms(us, origin=origin):
            return (us - origin) / 1e3

        for tick in step.gradients:
            ax.plot([ms(tick)] * 2, [-0.3, 0.3], color="tab:gray", linewidth=1.2)
        for row, bucket in enumerate(step.buckets, start=1):
            width = max(ms(bucket.ended) - ms(bucket.started), 0.05)
            ax.barh(row, width, left=ms(bucket.started), height=0.6, color=palette(row % 10))
            ax.plot(ms(bucket.launched), row, "k.", markersize=4)
        end = ms(step.backward_ended)
        ax.axvline(end, color="black", linestyle="--", linewidth=1)
        ax.axvspan(end, max(ms(b.ended) for b in step.buckets), color="tab:red", alpha=0.1)
        labels = ["gradient ready"] + [
            f"all-reduce {k} ({b.megabytes:.1f} MB)" for k, b in enumerate(step.buckets)
        ]
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
        ax.invert_yaxis()
        exposed = step.exposed() / 1e3
        ax.set_title(f"{title}: {exposed:.1f} ms of all-reduce exposed (shaded)", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    axes[-1].set_xlabel(
        "time since the backward pass began (ms); dashed: its compute ends; dot: launched"
    )
    fig.tight_layout()
    return fig


def hand_timed_differences(step: Step, events: list[dict]) -> list[float]:
    """`ddp_buckets.py`'s hooks timed the same step on Python's clock (`perf_counter`,
    seconds). Check that they saw the buckets the trace shows, as many and of the same
    sizes in the same order, launched in index order; return, in ms, how far each launch
    and each end lies from the trace's, once the offset between the two clocks (the
    median difference of the launches) is taken out."""
    launches = sorted((e for e in events if e["kind"] == "bucket_launch"), key=lambda e: e["time"])
    if [e["index"] for e in launches] != list(range(len(launches))):
        raise ValueError(f"{step.name}: buckets launched out of index order")
    hand_mb = [round(e["numel"] * 4 / 2**20, 3) for e in launches]
    trace_mb = [round(b.megabytes, 3) for b in step.buckets]
    if hand_mb != trace_mb:
        raise ValueError(f"{step.name}: hand-timed buckets {hand_mb} MB, trace {trace_mb} MB")
    both = list(zip(launches, step.buckets, strict=True))
    offset = sorted(1e6 * e["time"] - b.launched for e, b in both)[len(both) // 2]
    pairs = [(e["time"], b.launched) for e, b in both] + [(e["done"], b.ended) for e, b in both]
    return [(1e6 * seconds - offset - us) / 1e3 for seconds, us in pairs]
