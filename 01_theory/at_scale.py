"""DDP at 8 to 1,024 GPUs, by `cost_model` with figures from datasheets and from NCCL's
own source: nothing here is measured, and every figure says where it comes from.

Lesson 01, part 2 (`01_theory_at_scale.ipynb`) uses it after the model has been checked
against this machine's own runs; `published.py` holds it against a published run.

The all-reduce across machines is modelled as NCCL runs it: NCCL runs several channels
at once, each a ring or a tree, spread over every network card of a machine, so the
bandwidth of an all-reduce between machines is that of all the cards (nccl-tests calls
the measured figure busbw, doc/PERFORMANCE.md); its trees are a chain inside each
machine plus a double binary tree across machines; and for each call it prices every
algorithm with its own table of latencies and runs the quickest ("NCCL's choice").

To predict your own cluster, make a `Cluster` with its figures: busbw from nccl-tests'
`all_reduce_perf` on one machine and across machines, and NCCL's latencies as it prints
them with `NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING`.
"""

import math
from dataclasses import dataclass

from cost_model import Link, assign_buckets, step_timeline, two_level_seconds


@dataclass(frozen=True)
class Latency:
    """NCCL's latency model of one algorithm (seconds): `base` once per call, then per
    step `nvlink` inside a machine and `network` between machines."""

    base: float
    nvlink: float
    network: float


# NVIDIA/nccl, src/graph/tuning.cc, ncclTunerConstantsDefaults (NCCL 2.30.7), microseconds
# for the Simple protocol, NCCL's for large messages: baseLatencies {Tree 8.4, Ring 8.4},
# hwLatencies NVLINK {Tree 4.0, Ring 3.4} and NET {Tree 14, Ring 14.0}. LL and LL128
# (flags inside the data: lower latency, less bandwidth) win for small messages, so with
# Simple alone the model overstates what small buckets cost.
RING = Latency(base=8.4e-6, nvlink=3.4e-6, network=14.0e-6)
TREE = Latency(base=8.4e-6, nvlink=4.0e-6, network=14.0e-6)
TREE_BANDWIDTH = 0.92  # tuning.cc: the tree's busBw x .92


@dataclass(frozen=True)
class Cluster:
    """The figures of a cluster that the predictions use: edit them, or make your own."""

    name: str
    gpus_per_node: int
    inside_busbw: float  # bytes/s, all-reduce bus bandwidth inside one machine
    cards_per_node: int
    card_bandwidth: float  # bytes/s each way, one network card (datasheet)
    peak_flops: float  # one GPU, dense bf16 (datasheet)
    mfu: float  # share of peak a training step reaches (assumed)
    measured_busbw: float | None = None  # nccl-tests' busbw across machines, if you have it
    ring: Latency = RING
    tree: Latency = TREE

    @property
    def network_busbw(self) -> float:
        """Across machines: every card of a machine, one channel or more on each."""
        return self.measured_busbw or self.cards_per_node * self.card_bandwidth


# NVIDIA H100 SXM5 datasheet: NVLink 900 GB/s per GPU (both ways together), 1,979 TFLOPS
# of bf16 "with sparsity", so 989.5 dense. ConnectX-7 InfiniBand NDR: 400 Gb/s, 50 GB/s
# each way, one card per GPU in a DGX H100. 100 Gb/s Ethernet (IEEE 802.3): 12.5 GB/s.
H100_INFINIBAND = Cluster("InfiniBand 400 Gb/s per GPU", 8, 450e9, 8, 50e9, 989.5e12, 0.4)
H100_ETHERNET = Cluster("Ethernet 100 Gb/s per machine", 8, 450e9, 1, 12.5e9, 989.5e12, 0.4)
CLUSTERS = (H100_INFINIBAND, H100_ETHERNET)


def _shape(gpus: int, cluster: Cluster) -> tuple[int, int, float]:
    """Machines, GPUs per machine, and the bus bandwidth of the slowest hop."""
    nodes = max(1, gpus // cluster.gpus_per_node)
    busbw = cluster.inside_busbw if nodes == 1 else cluster.network_busbw
    return nodes, min(gpus, cluster.gpus_per_node), busbw


def ring_seconds(nbytes: float, gpus: int, cluster: Cluster) -> float:
    """NCCL's flat ring: 2(N-1) steps, 2(machines-1) of them between machines."""
    if gpus == 1:
        return 0.0
    nodes, _, busbw = _shape(gpus, cluster)
    steps, across = 2 * (gpus - 1), 2 * (nodes - 1)
    lat = cluster.ring
    latency = lat.base + (steps - across) * lat.nvlink + across * lat.network
    return latency + 2 * (gpus - 1) / gpus * nbytes / busbw


def tree_seconds(nbytes: float, gpus: int, cluster: Cluster) -> float:
    """NCCL's tree: a chain through each machine's GPUs, a double binary tree across
    machines, reduced up and broadcast down: 2n bytes per rank (`cost_model`)."""
    if gpus == 1:
        return 0.0
    nodes, inside, busbw = _shape(gpus, cluster)
    lat = cluster.tree
    latency = lat.base + 2 * ((inside - 1) * lat.nvlink + int(math.log2(nodes)) * lat.network)
    return latency + 2 * nbytes / (TREE_BANDWIDTH * busbw)


def horovod_seconds(nbytes: float, gpus: int, cluster: Cluster) -> float:
    """Horovod's hierarchical all-reduce: reduce-scatter inside each machine, one ring
    per GPU across machines on its 1/G share (sharing the cards), all-gather inside;
    three calls, priced with NCCL's ring latencies."""
    if gpus == 1:
        return 0.0
    nodes, inside, _ = _shape(gpus, cluster)
    lat = cluster.ring
    inner = Link(lat.nvlink, cluster.inside_busbw)
    across = Link(lat.network, cluster.network_busbw / inside)
    return 3 * lat.base + two_level_seconds(nbytes, inside, nodes, inner, across)


def nccl_choice(nbytes: float, gpus: int, cluster: Cluster) -> tuple[str, float]:
    """What NCCL does per call: price each algorithm, run the quickest."""
    ring, tree = ring_seconds(nbytes, gpus, cluster), tree_seconds(nbytes, gpus, cluster)
    return ("ring", ring) if ring <= tree else ("tree", tree)


ALGORITHMS = {
    "NCCL's choice": lambda n, g, c: nccl_choice(n, g, c)[1],
    "ring": ring_seconds,
    "tree": tree_seconds,
    "Horovod's two-level ring": horovod_seconds,
}


@dataclass(frozen=True)
class GPT:
    """A GPT's shape (GPT-2/GPT-3 style, tied embeddings)."""

    name: str
    layers: int
    width: int
    context: int
    vocabulary: int = 50257

    @property
    def layer_parameters(self) -> int:
        return 12 * self.width**2 + 13 * self.width  # attention 4 d^2, MLP 8 d^2, biases, norms

    @property
    def parameters(self) -> int:
        embeddings = (self.vocabulary + self.context) * self.width
        return self.layers * self.layer_parameters + embeddings + 2 * self.width

    @property
    def flops_per_token(self) -> float:
        """6 per multiplied weight (forward 2, backward 4; the tied output layer's
        included, embedding lookups not) plus attention's 12 x layers x width x context,
        as lesson 05 counts them."""
        multiplied = self.layers * 12 * self.width**2 + self.vocabulary * self.width
        return 6 * multiplied + 12 * self.layers * self.width * self.context

    @property
    def output_layer_share(self) -> float:
        """The tied output layer's share of the FLOPs (and of the backward)."""
        return 6 * self.vocabulary * self.width / self.flops_per_token


GPT_125M = GPT("GPT 125M", layers=12, width=768, context=1024)
GPT_1_3B = GPT("GPT 1.3B", layers=24, width=2048, context=2048)


def gradient_arrivals(model: GPT, backward: float) -> tuple[list[float], list[int]]:
    """When each gradient is ready and its bytes (fp32), each piece of the backward
    taking time in proportion to its FLOPs. The tied output layer runs first
    (`output_layer_share` of the backward) and readies nothing: its gradient adds to the token
    embeddings', complete only when the embeddings' backward ends it. Then the final
    norm, and the layers from the last, each in the order its backward reaches its
    tensors (MLP out, MLP in, norm, attention out, the attention itself, attention in,
    norm); the embeddings come last."""
    d = model.width
    layer = [(4 * d * d + d, 0), (4 * d * d + 4 * d, 0), (2 * d, 0), (d * d + d, 0),
             (3 * d * d + 3 * d, 8 * d * model.context), (2 * d, 0)]  # fmt: skip
    output_layer = 4 * model.vocabulary * d
    total = output_layer + model.layers * sum(4 * numel + extra for numel, extra in layer)
    seconds = backward / total  # per backward FLOP of one token
    clock = output_layer * seconds
    ready, sizes = [clock], [4 * 2 * d]  # the final norm
    for _ in range(model.layers):
        for numel, attention in layer:  # a matrix product's backward: 4 FLOPs per weight
            clock += (4 * numel + attention) * seconds
            ready.append(min(clock, backward))  # not past the end by rounding
            sizes.append(4 * numel)
    ready.append(backward)
    sizes.append(4 * (model.vocabulary + model.context) * d)
    return ready, sizes


def ddp_step(forward: float, backward: float, arrivals, bucket_cap_mb: float, all_reduce,
             overlap: bool = True):  # fmt: skip
    """One synchronized DDP step, buckets as DDP makes them (the first capped at 1 MiB
    unless the cap is smaller), each bucket costed by `all_reduce(nbytes)`."""
    ready, sizes = arrivals
    cap = int(bucket_cap_mb * 2**20)
    buckets = assign_buckets(sizes, cap, min(cap, 2**20))
    return step_timeline(forward, ready, sizes, backward, 0.0, buckets, all_reduce, overlap)


def predict(model: GPT, gpus: int, cluster: Cluster, sequences_per_gpu: float,
            algorithm="NCCL's choice", bucket_cap_mb=25.0, accumulation=1):  # fmt: skip
    """The model's DDP step for `model` on `gpus` GPUs, `sequences_per_gpu` per micro-
    step: a Timeline, and the scaling efficiency (compute / time, over the
    `accumulation` micro-steps of one optimizer step; all but the last skip the
    all-reduce). Forward a third of the compute, backward two thirds."""
    tokens = sequences_per_gpu * model.context
    compute = model.flops_per_token * tokens / (cluster.peak_flops * cluster.mfu)
    backward = 2 * compute / 3
    cost = ALGORITHMS[algorithm]
    timeline = ddp_step(compute / 3, backward, gradient_arrivals(model, backward),
                        bucket_cap_mb, lambda n: cost(n, gpus, cluster))  # fmt: skip
    efficiency = accumulation * compute / ((accumulation - 1) * compute + timeline.step)
    return timeline, efficiency


def strong_scaling(model: GPT, gpus: int, cluster: Cluster, global_tokens: int, **options):
    """Efficiency at a fixed global batch, split over `gpus` GPUs; None where there are
    fewer sequences than GPUs (data parallelism cannot split one)."""
    sequences = global_tokens / model.context / gpus
    return predict(model, gpus, cluster, sequences, **options)[1] if sequences >= 1 else None


def gpu_counts(largest: int = 1024) -> list[int]:
    return [2**k for k in range(3, int(math.log2(largest)) + 1)]
