"""What a collective and a DDP step cost, by the latency-bandwidth (alpha-beta) model.

Lesson 01, part 2 (`01_theory_at_scale.ipynb`) fits the model to this machine's
measurements, checks it against runs it was not fitted on (the `check_*` functions
below, each against a null model it must beat), and then uses it with datasheet
figures for machines the course cannot run on (`at_scale.py`).

Sending a message of n bytes costs `alpha + n * beta`: alpha is the fixed cost of any
message (software, latency of the link), beta the seconds per byte (1 / bandwidth).
A collective is a sequence of such messages, so its cost is a sum of them:

- ring all-reduce over N ranks: 2(N-1) steps, each moving n/N bytes per rank
  (lesson 01's ring): 2(N-1) alpha + 2(N-1)/N n beta;
- reduce to one rank, then broadcast from it, one message at a time through the
  root: 2(N-1) (alpha + n beta): the root's link carries everything;
- a pipelined binary tree, reduce up then broadcast down, the tensor streamed through
  in small pieces: 2 ceil(log2 N) alpha + 2 n beta: log N steps of latency instead of
  the ring's N, for about the ring's bytes, 2n per rank. One binary tree does not get
  there: an inner rank sends n up and n to each of its two children, 3n. NCCL's double
  binary tree does: two trees, each carrying half the tensor, every rank inner in at
  most one of them, so no rank sends more than 2n (`at_scale` uses it across machines);
- two-level: a ring inside each machine (fast links) to reduce-scatter, rings across
  machines on each rank's 1/G share, then a ring inside each machine to all-gather
  (Horovod's hierarchical all-reduce; NCCL itself runs flat rings and trees).

A DDP step is compute plus the all-reduces of its gradient buckets; a bucket's
all-reduce starts once its last gradient is ready and the previous bucket's is done
(one communication stream, in order), so most of it hides behind the rest of the
backward pass. `step_timeline` plays that out.
"""

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Link:
    """A link: latency per message (seconds), bandwidth (bytes per second, one way)."""

    alpha: float
    bandwidth: float

    @property
    def beta(self) -> float:
        return 1.0 / self.bandwidth


def ring_seconds(nbytes: float, world_size: int, link: Link) -> float:
    """Ring all-reduce: 2(N-1) steps of n/N bytes each."""
    if world_size == 1:
        return 0.0
    steps = 2 * (world_size - 1)
    return steps * link.alpha + steps / world_size * nbytes * link.beta


def reduce_broadcast_seconds(nbytes: float, world_size: int, link: Link) -> float:
    """Every rank's tensor to the root, the sum back, one message at a time through it."""
    return 2 * (world_size - 1) * (link.alpha + nbytes * link.beta)


def tree_seconds(nbytes: float, world_size: int, link: Link) -> float:
    """Reduce up a tree and broadcast down it, pipelined: 2 ceil(log2 N) hops, 2n bytes."""
    if world_size == 1:
        return 0.0
    return 2 * math.ceil(math.log2(world_size)) * link.alpha + 2 * nbytes * link.beta


def two_level_seconds(
    nbytes: float, gpus_per_node: int, nodes: int, inside: Link, across: Link
) -> float:
    """Reduce-scatter in a ring inside each machine, all-reduce each rank's 1/G share
    in a ring across machines (G rings side by side, one network card per GPU), then
    all-gather inside each machine."""
    inner = ring_seconds(nbytes, gpus_per_node, inside)  # reduce-scatter + all-gather
    return inner + ring_seconds(nbytes / gpus_per_node, nodes, across)


def fit_alpha_beta(rows: list[dict], seconds_key: str) -> Link:
    """alpha and beta of the ring formula that best fit measured all-reduces.

    `rows` are the benchmark's (lesson 01's `ring_allreduce.py --out`): bytes,
    world_size and seconds. The fit minimizes *relative* error (each row weighted by
    1 / its time), since the sizes span four orders of magnitude and a plain least
    squares would fit only the largest. Neither may be negative: a negative alpha
    would say a message takes less than no time.
    """
    steps = np.array([2.0 * (r["world_size"] - 1) for r in rows])
    shares = np.array([2.0 * (r["world_size"] - 1) / r["world_size"] * r["bytes"] for r in rows])
    seconds = np.array([r[seconds_key] for r in rows])
    design = np.stack([steps, shares], axis=1) / seconds[:, None]
    target = np.ones_like(seconds)
    (alpha, beta), *_ = np.linalg.lstsq(design, target, rcond=None)
    if alpha < 0:  # all in beta: refit with alpha = 0
        alpha, beta = 0.0, float(np.dot(design[:, 1], target) / np.dot(design[:, 1], design[:, 1]))
    elif beta < 0:
        alpha, beta = float(np.dot(design[:, 0], target) / np.dot(design[:, 0], design[:, 0])), 0.0
    return Link(alpha=float(alpha), bandwidth=1.0 / beta if beta > 0 else math.inf)


def relative_errors(rows: list[dict], seconds_key: str, link: Link) -> list[float]:
    """(predicted - measured) / measured for each row, by the ring formula."""
    return [ring_seconds(r["bytes"], r["world_size"], link) / r[seconds_key] - 1 for r in rows]


def assign_buckets(sizes: list[int], cap_bytes: int, first_cap_bytes: int) -> list[list[int]]:
    """DDP's bucketing of gradients, given in the order they become ready (the last
    layer's first): a bucket takes gradients until it holds at least its cap; the
    first bucket's cap is `first_cap_bytes` (1 MiB in PyTorch, so that the first
    all-reduce starts early), every other's `cap_bytes` (bucket_cap_mb)."""
    buckets, current, held = [], [], 0
    for index, size in enumerate(sizes):
        current.append(index)
        held += size
        if held >= (first_cap_bytes if not buckets else cap_bytes):
            buckets.append(current)
            current, held = [], 0
    if current:
        buckets.append(current)
    return buckets


@dataclass
class Timeline:
    """One DDP step as the model plays it: when the backward pass ends, and when each
    bucket's all-reduce starts and ends (seconds from the start of the backward)."""

    forward: float
    backward: float
    optimizer: float
    buckets: list[tuple[float, float, int]]  # (start, end, bytes)

    @property
    def communication_end(self) -> float:
        return max((end for _, end, _ in self.buckets), default=0.0)

    @property
    def exposed_communication(self) -> float:
        """Communication the backward pass did not hide: the step waits for it."""
        return max(0.0, self.communication_end - self.backward)

    @property
    def step(self) -> float:
        return self.forward + self.backward + self.exposed_communication + self.optimizer

    @property
    def compute(self) -> float:
        return self.forward + self.backward + self.optimizer


def step_timeline(
    forward: float,
    ready: list[float],
    sizes: list[int],
    backward: float,
    optimizer: float,
    buckets: list[list[int]],
    all_reduce,
    overlap: bool = True,
) -> Timeline:
    """Play one DDP step: `ready[i]` is when gradient i is ready (seconds after the
    backward starts), `sizes[i]` its bytes, `buckets` lists gradient indices per bucket
    in launch order, `all_reduce(nbytes)` the seconds one bucket's all-reduce takes.
    `overlap=False`: communication cannot run beside the backward pass (on a machine
    whose every core computes, gloo's all-reduces wait for the cores), so each bucket
    starts after the backward has ended."""
    spans, free_at = [], 0.0 if overlap else backward
    for bucket in buckets:
        start = max(max(ready[i] for i in bucket), free_at)
        nbytes = sum(sizes[i] for i in bucket)
        free_at = start + all_reduce(nbytes)
        spans.append((start, free_at, nbytes))
    return Timeline(forward=forward, backward=backward, optimizer=optimizer, buckets=spans)


def predict_measured_step(
    row: dict, link: Link, overlap: bool, copy_seconds_per_byte: float = 0.0
) -> Timeline:
    """The model's step for one of `ddp_step_times.py`'s measurements: that world's
    compute (timed with the all-reduces off), its gradients' arrival times and the
    buckets DDP built, each bucket's all-reduce costed by the ring formula plus the
    copy of its gradients into the bucket and back (`copy_seconds_per_byte`, what DDP
    costs in a world of 1, where there is nothing to communicate)."""
    compute, world_size = row["compute"], row["world_size"]
    return step_timeline(
        compute["forward"],
        row["ready"],
        row["sizes"],
        compute["backward"],
        compute["optimizer"],
        row["buckets"],
        lambda nbytes: ring_seconds(nbytes, world_size, link) + nbytes * copy_seconds_per_byte,
        overlap=overlap,
    )


def copy_cost(row: dict) -> float:
    """Seconds per gradient byte DDP adds in a world of 1 (bucket copies, hooks)."""
    return max(0.0, row["step"] - row["compute"]["step"]) / sum(row["sizes"])


# The checks. Each compares the model with runs it was not fitted on, and with a null
# model (a guess that knows nothing of how a ring works) that it must beat: an error
# within the bound proves little if a constant would have done as well.
BOUND = 0.25  # median relative error allowed, on a quiet machine
NULL_MARGIN = 0.5  # the model's error may be at most half the null model's
BANDWIDTH_REGIME = 2**20  # from 1 MB up, a message's time is mostly bandwidth


@dataclass
class Check:
    """What a check found: the model's and the null model's median relative error."""

    name: str
    model_error: float
    null_name: str
    null_error: float
    bound: float = BOUND

    @property
    def beats_null(self) -> bool:
        return self.model_error <= NULL_MARGIN * self.null_error

    @property  # within the bound, and well under the null model's error
    def passed(self) -> bool:
        return self.model_error <= self.bound and self.beats_null

    def line(self) -> str:
        verdict = "passes" if self.passed else "fails"
        return (
            f"{self.name}: model {self.model_error:.0%} off, {self.null_name} "
            f"{self.null_error:.0%} off; {verdict} (bound {self.bound:.0%}, and at most "
            f"{NULL_MARGIN:.0%} of the null model's error)"
        )


def median_error(predicted: list[float], measured: list[float]) -> float:
    return float(np.median([abs(p / m - 1) for p, m in zip(predicted, measured, strict=True)]))


def check_held_out_sizes(rows: list[dict], seconds_key: str, fit_up_to: int = 4 * 2**20) -> Check:
    """Fit alpha and beta on the sizes up to `fit_up_to`, predict the larger ones.
    Null model: constant time, each world's largest fitted size's time."""
    fitted = [r for r in rows if r["bytes"] <= fit_up_to]
    held_out = [r for r in rows if r["bytes"] > fit_up_to]
    link = fit_alpha_beta(fitted, seconds_key)
    largest = {r["world_size"]: r for r in sorted(fitted, key=lambda r: r["bytes"])}
    measured = [r[seconds_key] for r in held_out]
    return Check(
        f"sizes above {fit_up_to / 2**20:g} MB, fitted below",
        median_error([ring_seconds(r["bytes"], r["world_size"], link) for r in held_out], measured),
        "constant time",
        median_error([largest[r["world_size"]][seconds_key] for r in held_out], measured),
    )


def check_world_size(rows: list[dict], seconds_key: str, fitted_world: int = 2,
                     predicted_world: int = 4) -> Check:  # fmt: skip
    """Fit on one world size, predict a larger one from 1 MB up, where the ring's
    2(N-1)/N shows. Null model: the fitted world's time at the same size."""
    link = fit_alpha_beta([r for r in rows if r["world_size"] == fitted_world], seconds_key)
    same = {r["bytes"]: r for r in rows if r["world_size"] == fitted_world}
    held_out = [r for r in rows if r["world_size"] == predicted_world
                and r["bytes"] >= BANDWIDTH_REGIME and r["bytes"] in same]  # fmt: skip
    measured = [r[seconds_key] for r in held_out]
    predicted = [ring_seconds(r["bytes"], predicted_world, link) for r in held_out]
    return Check(
        f"world size {predicted_world}, fitted on {fitted_world}",
        median_error(predicted, measured),
        "no dependence on the world size",
        median_error([same[r["bytes"]][seconds_key] for r in held_out], measured),
    )


def check_steps(rows: list[dict], link: Link, overlap: bool, copy_seconds_per_byte: float) -> Check:
    """The step model against measured DDP steps (worlds of 2 and more). Null model: no
    communication, the step is the compute measured with the all-reduces off."""
    rows = [r for r in rows if r["world_size"] > 1]
    measured = [r["step"] for r in rows]
    predicted = [predict_measured_step(r, link, overlap, copy_seconds_per_byte).step for r in rows]
    return Check(
        f"DDP steps, {'overlap' if overlap else 'no overlap'}",
        median_error(predicted, measured),
        "no communication",
        median_error([r["compute"]["step"] for r in rows], measured),
    )
