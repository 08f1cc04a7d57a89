"""The predictions at scale (`01_theory/at_scale.py`) and the published comparison
(`published.py`), each held against what it models: lesson 05's GPT, NCCL's tuning
table, DDP's overlap, torchvision's ResNet-50."""

import pytest
import torch
from conftest import lesson_module

at_scale = lesson_module("01_theory", "at_scale")
published = lesson_module("01_theory", "published")


def test_the_gpt_shapes_count_as_lesson_05_s_model():
    model_py = lesson_module("05_mingpt", "model")
    efficiency = lesson_module("05_mingpt", "efficiency")
    for gpt in (at_scale.GPT_125M, at_scale.GPT_1_3B):
        shape = model_py.GPTShape(vocab_size=gpt.vocabulary, block_size=gpt.context,
                                  n_layer=gpt.layers, n_head=16, n_embd=gpt.width,
                                  tie_weights=True)  # fmt: skip
        with torch.device("meta"):
            model = model_py.GPT(shape)
        assert gpt.parameters == sum(p.numel() for p in model.parameters())
        assert gpt.flops_per_token == efficiency.model_flops_per_token(model, gpt.context)
        assert gpt.layer_parameters == sum(p.numel() for p in model.blocks[0].parameters())
        ready, sizes = at_scale.gradient_arrivals(gpt, 1.0)
        assert sum(sizes) == 4 * gpt.parameters
        assert ready == sorted(ready) and ready[-1] == 1.0


def test_the_tied_output_layer_runs_first_and_readies_nothing():
    gpt = at_scale.GPT_125M
    assert gpt.output_layer_share == pytest.approx(0.27, abs=0.005)
    ready, sizes = at_scale.gradient_arrivals(gpt, 1.0)
    # Its backward is its share of the FLOPs (biases and norms aside); only the final
    # norm is ready then, and the tied embeddings come last.
    assert ready[0] == pytest.approx(gpt.output_layer_share, rel=0.01)
    assert sizes[0] == 4 * 2 * gpt.width
    assert sizes[-1] == 4 * (gpt.vocabulary + gpt.context) * gpt.width and ready[-1] == 1.0


def test_nccl_s_choice_is_the_default_and_a_ring_on_one_machine():
    # Its tree for 25 MB buckets at 1,024 GPUs: the at-scale notebook's check cell.
    ib, gpt = at_scale.H100_INFINIBAND, at_scale.GPT_125M
    assert at_scale.nccl_choice(25 * 2**20, 8, ib)[0] == "ring"  # one machine: bandwidth wins
    default = at_scale.predict(gpt, 1024, ib, 8)[1]
    assert default == at_scale.predict(gpt, 1024, ib, 8, algorithm="NCCL's choice")[1]
    assert default > at_scale.predict(gpt, 1024, ib, 8, algorithm="ring")[1] + 0.5


def test_nccl_s_latencies_are_its_tuning_table_s():
    # NCCL's own sum at 128 machines x 8 GPUs, Simple protocol.
    ib = at_scale.H100_INFINIBAND
    ring, tree = at_scale.ring_seconds(0, 1024, ib), at_scale.tree_seconds(0, 1024, ib)
    assert ring == pytest.approx((8.4 + 1792 * 3.4 + 254 * 14) * 1e-6)
    assert tree == pytest.approx((8.4 + 2 * (7 * 4.0 + 7 * 14)) * 1e-6)


def test_the_flat_ring_s_bandwidth_term_uses_every_card_of_a_machine():
    n, gpus = 2**30, 64

    def bandwidth_term(cluster):
        return at_scale.ring_seconds(n, gpus, cluster) - at_scale.ring_seconds(0, gpus, cluster)

    eight = bandwidth_term(at_scale.H100_INFINIBAND)
    assert eight == pytest.approx(2 * (gpus - 1) / gpus * n / (8 * 50e9))
    one = at_scale.Cluster("one card", 8, 450e9, 1, 50e9, 1e15, 0.4)
    assert bandwidth_term(one) == pytest.approx(8 * eight)
    measured = at_scale.Cluster("yours", 8, 450e9, 8, 50e9, 1e15, 0.4, measured_busbw=3e11)
    assert bandwidth_term(measured) == pytest.approx(2 * (gpus - 1) / gpus * n / 3e11)


def test_predictions_move_the_way_the_model_says():
    ib, ethernet = at_scale.CLUSTERS
    gpt = at_scale.GPT_125M
    for gpus in at_scale.gpu_counts():
        fast = at_scale.predict(gpt, gpus, ib, 8)[1]
        slow = at_scale.predict(gpt, gpus, ethernet, 8)[1]
        accumulated = at_scale.predict(gpt, gpus, ethernet, 8, accumulation=8)[1]
        assert 0 < slow <= fast <= 1
        assert slow < accumulated <= 1
    # Inside one machine the all-reduce almost hides (not the embeddings' last bucket);
    # across one Ethernet card per machine it cannot.
    inside = at_scale.predict(gpt, 8, ethernet, 8)[0]
    assert 0 < inside.exposed_communication < 0.05 * inside.step
    assert at_scale.predict(gpt, 64, ethernet, 8)[1] < 0.5
    # Latency: at 1,024 GPUs small buckets cost what big ones do not.
    small = at_scale.predict(gpt, 1024, ib, 8, bucket_cap_mb=1)[1]
    assert small < at_scale.predict(gpt, 1024, ib, 8, bucket_cap_mb=25)[1] - 0.2


def test_a_fixed_global_batch_scales_on_one_machine_and_cannot_split_past_its_sequences():
    # Its collapse at 512 GPUs (under 0.5): the at-scale notebook's check cell.
    gpt, ib = at_scale.GPT_125M, at_scale.H100_INFINIBAND
    half_million = 2**19  # GPT-3's batch for its 125M model, in tokens
    assert at_scale.strong_scaling(gpt, 8, ib, half_million) > 0.95
    assert at_scale.strong_scaling(gpt, 1024, ib, half_million) is None  # 512 sequences
    assert at_scale.predict(gpt, 512, ib, 8)[1] > 0.9  # the batch per GPU fixed instead


def test_resnet50_s_tensors_are_torchvision_s():
    tensors = published.resnet50_tensors()
    assert len(tensors) == 161
    assert sum(published.numel(shape) for shape, _ in tensors) == 25_557_032
    assert tensors[0][0] == (64, 3, 7, 7) and tensors[-2][0] == (1000, 2048)
    # About 4.1 billion multiply-adds per 224 x 224 image, as ResNet-50's are counted.
    assert sum(flops for _, flops in tensors) / 2 == pytest.approx(4.09e9, rel=0.01)


def test_the_published_comparison_reads_the_model_not_the_figures():
    per_bucket = published.fitted_per_bucket()
    assert per_bucket > 0
    small = published.resnet50_step(16, 1, per_bucket=per_bucket)[1]
    big = published.resnet50_step(16, 25, per_bucket=per_bucket)[1]
    assert big / small - 1 == pytest.approx(published.PUBLISHED_CAP_1_AT_16)
    # From 8 to 16 GPUs the step grows by the communication it exposes: with overlap,
    # little; without, the whole all-reduce across two machines.
    steps = {o: [published.resnet50_step(g, overlap=o)[1] for g in (8, 16)] for o in (True, False)}
    growth = {o: after / before - 1 for o, (before, after) in steps.items()}
    assert 0 <= growth[True] < 0.01 < growth[False]
    assert published.resnet50_step(1)[0].step == published.PUBLISHED["1 GPU, no DDP"]
