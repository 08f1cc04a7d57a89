"""DDP at 8 to 1,024 GPUs, by `common.cost_model` with datasheet figures: nothing here
is measured, and every figure says where it comes from.

Introduced in 01_theory, part 2 (`01_theory_at_scale.ipynb`), after the model has been
checked against this machine's own runs.

What is assumed, in one place so that a reader can change it:
- the links: `NETWORKS` (bandwidth from the datasheets named beside each; latency per
  message assumed, an order of magnitude, not measured);
- the GPU: `PEAK_FLOPS` (datasheet) and `MFU`, the share of it a training step reaches
  (assumed; lesson 05 measures its own on the machine it runs on);
- the step: forward one third of the compute, backward two thirds (a matrix product's
  backward costs two products), gradients ready evenly along the backward pass, last
  layer first, in fp32 (4 bytes per parameter, as DDP all-reduces them under bf16
  autocast).
"""

import math
from dataclasses import dataclass

from common.cost_model import (
    Link,
    assign_buckets,
    ring_seconds,
    step_timeline,
    tree_seconds,
    two_level_seconds,
)

GPUS_PER_NODE = 8
# NVIDIA H100 SXM5 datasheet: NVLink 900 GB/s per GPU, both directions together.
NVLINK = Link(alpha=2e-6, bandwidth=450e9)


@dataclass(frozen=True)
class Network:
    """The network between machines: one card's link, and how many cards a machine has."""

    card: Link
    cards_per_node: int


NETWORKS = {
    # InfiniBand NDR (NVIDIA ConnectX-7): 400 Gb/s per port, 50 GB/s each way; a DGX H100
    # has one such port per GPU.
    "InfiniBand 400 Gb/s per GPU": Network(Link(alpha=5e-6, bandwidth=50e9), GPUS_PER_NODE),
    # 100 Gb/s Ethernet (IEEE 802.3, 100GBASE): 12.5 GB/s each way, one card per machine.
    "Ethernet 100 Gb/s per machine": Network(Link(alpha=20e-6, bandwidth=12.5e9), 1),
}
# NVIDIA H100 SXM5 datasheet: 1,979 TFLOPS of bf16 "with sparsity", so 989.5 dense.
PEAK_FLOPS = 989.5e12
MFU = 0.4  # assumed


@dataclass(frozen=True)
class GPT:
    """A GPT's shape (GPT-2/GPT-3 style, tied embeddings) and its batch per GPU."""

    name: str
    layers: int
    width: int
    context: int
    vocabulary: int = 50257
    sequences_per_gpu: int = 8

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
    def compute_seconds(self) -> float:
        tokens = self.sequences_per_gpu * self.context
        return self.flops_per_token * tokens / (PEAK_FLOPS * MFU)


GPT_125M = GPT("GPT 125M", layers=12, width=768, context=1024)
GPT_1_3B = GPT("GPT 1.3B", layers=24, width=2048, context=2048, sequences_per_gpu=4)


def gradient_arrivals(model: GPT, backward: float) -> tuple[list[float], list[int]]:
    """When each weight's gradient is ready and its bytes: layer by layer from the last,
    evenly along the backward pass, each layer's tensors in the order its backward
    reaches them (MLP out, MLP in, attention out, attention in with its biases, the two
    norms); the embeddings come last."""
    d = model.width
    layer = [4 * d * d + d, 4 * d * d + 4 * d, d * d + d, 3 * d * d + 3 * d, 4 * d]
    sizes, ready = [], []
    per_layer = backward / (model.layers + 1)
    for k in range(model.layers):
        done = 0
        for numel in layer:  # within a layer, time in proportion to its weights
            done += numel
            sizes.append(4 * numel)
            ready.append(per_layer * (k + done / sum(layer)))
    sizes.append(4 * (model.parameters - model.layers * model.layer_parameters))
    ready.append(backward)
    return ready, sizes


def all_reduce_cost(gpus: int, network: Network, algorithm: str, inside_link: Link = NVLINK):
    """Seconds to all-reduce n bytes over `gpus` GPUs, 8 per machine (fewer: one machine).

    A flat ring or tree crosses between machines on one card at a time, and is as fast
    as that slowest hop; the two-level ring runs one ring per GPU across machines, side
    by side, sharing the machine's cards."""
    nodes = max(1, gpus // GPUS_PER_NODE)
    inside = min(gpus, GPUS_PER_NODE)
    card = network.card
    if algorithm == "two-level ring":
        share = card.bandwidth * network.cards_per_node / inside
        return lambda n: two_level_seconds(n, inside, nodes, inside_link, Link(card.alpha, share))
    slowest = inside_link if nodes == 1 else card
    if algorithm == "flat ring":
        return lambda n: ring_seconds(n, gpus, slowest)
    if algorithm == "tree":
        return lambda n: tree_seconds(n, gpus, slowest)
    raise ValueError(f"unknown algorithm {algorithm!r}")


def predict(
    model: GPT,
    gpus: int,
    network: Network,
    algorithm: str = "two-level ring",
    bucket_cap_mb: float = 25,
    accumulation: int = 1,
):
    """The model's DDP step for `model` on `gpus` GPUs: a Timeline of the synchronized
    micro-step, and the scaling efficiency (compute / time, over the `accumulation`
    micro-steps of one optimizer step; the first accumulation - 1 skip the all-reduce)."""
    compute = model.compute_seconds
    all_reduce = all_reduce_cost(gpus, network, algorithm)
    timeline = ddp_step(compute, lambda backward: gradient_arrivals(model, backward),
                        bucket_cap_mb, all_reduce)  # fmt: skip
    efficiency = accumulation * compute / ((accumulation - 1) * compute + timeline.step)
    return timeline, efficiency


def ddp_step(compute: float, arrivals, bucket_cap_mb: float, all_reduce):
    """One synchronized DDP step of `compute` seconds: forward a third, backward two
    thirds, `arrivals(backward)` giving each gradient's ready time and bytes, buckets as
    DDP makes them (the first capped at 1 MiB unless the cap is smaller)."""
    forward, backward = compute / 3, 2 * compute / 3
    ready, sizes = arrivals(backward)
    cap = int(bucket_cap_mb * 2**20)
    buckets = assign_buckets(sizes, cap, min(cap, 2**20))
    return step_timeline(forward, ready, sizes, backward, 0.0, buckets, all_reduce)


def gpu_counts(largest: int = 1024) -> list[int]:
    return [2**k for k in range(3, int(math.log2(largest)) + 1)]


# A published measurement to hold the model against: PyTorch's DDP benchmark
# (pytorch/pytorch, benchmarks/distributed/ddp/README.md): ResNet-50, batch 32 per GPU,
# V100 GPUs in DGX-1 machines (8 GPUs, NVLink), 4 x 100 Gb/s InfiniBand per machine,
# nccl, PyTorch 1.4. Its p50 seconds per iteration, and bucket_cap_mb=1 against the
# default 25 at 16 GPUs (p75).
PUBLISHED = {"1 GPU, no DDP": 0.097, "1 GPU, DDP": 0.100, "8 GPUs": 0.104, "16 GPUs": 0.104}
PUBLISHED_CAP_1_AT_16 = -0.038  # throughput change, bucket_cap_mb=1 against 25
RESNET50_PARAMETERS = 25_557_032  # torchvision's ResNet-50 model card
# V100 SXM2 datasheet: NVLink 300 GB/s per GPU, both directions together.
V100_NVLINK = Link(alpha=2e-6, bandwidth=150e9)
DGX1_NETWORK = Network(Link(alpha=5e-6, bandwidth=12.5e9), cards_per_node=4)


def resnet50_step(gpus: int, bucket_cap_mb: float = 25, pieces: int = 50):
    """The model's DDP step for the published ResNet-50 runs: the 1-GPU time without DDP
    as compute, its gradients arriving evenly along the backward in `pieces` equal parts
    (assumed: ResNet's layers are not equal), a two-level ring across 8-GPU machines."""
    sizes = [4 * RESNET50_PARAMETERS // pieces] * pieces

    def arrivals(backward):
        return [backward * (i + 1) / pieces for i in range(pieces)], sizes

    all_reduce = all_reduce_cost(gpus, DGX1_NETWORK, "two-level ring", inside_link=V100_NVLINK)
    return ddp_step(PUBLISHED["1 GPU, no DDP"], arrivals, bucket_cap_mb, all_reduce)
