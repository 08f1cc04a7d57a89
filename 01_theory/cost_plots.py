"""The figures of 01_theory, part 2 (`01_theory_at_scale.ipynb`): the alpha-beta model
against this machine's measurements, a DDP step's timeline, and the predictions for
GPUs (`at_scale.py`). One idea per figure, axes labelled with their units."""

import matplotlib.pyplot as plt
from at_scale import ALGORITHMS, CLUSTERS, gpu_counts, predict, strong_scaling
from cost_model import Link, ring_seconds


def fit_figure(rows: list[dict], name: str, link: Link, fitted_on):
    """Measured times of `name` (the benchmark's "all_reduce" or "ring"; points: each
    size's fastest call; bars: up to its slowest) and the fitted model (lines), per world
    size; the rows the fit never saw (`fitted_on(row)` false) drawn with open points."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for world_size in sorted({r["world_size"] for r in rows}):
        mine = sorted((r for r in rows if r["world_size"] == world_size), key=lambda r: r["bytes"])
        sizes = [r["bytes"] for r in mine]
        (line,) = ax.plot(sizes, [ring_seconds(n, world_size, link) * 1e3 for n in sizes],
                          label=f"model, {world_size} processes")  # fmt: skip
        for seen in (True, False):
            shown = [r for r in mine if bool(fitted_on(r)) == seen]
            if not shown:
                continue
            fastest = [r[f"{name}_fastest"] * 1e3 for r in shown]
            above = [r[f"{name}_slowest"] * 1e3 - f for f, r in zip(fastest, shown, strict=True)]
            label = f"measured, {world_size}" + ("" if seen else ", held out")
            ax.errorbar([r["bytes"] for r in shown], fastest, yerr=[[0] * len(shown), above],
                        fmt="o", capsize=2, color=line.get_color(),
                        fillstyle="full" if seen else "none", label=label)  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tensor size (bytes)")
    ax.set_ylabel(f"{name} time (ms): fastest, bar to slowest")
    ax.set_title(f"{name}, fitted on the filled points: alpha = {link.alpha * 1e6:.0f} us, "
                 f"bandwidth = {link.bandwidth / 1e9:.2f} GB/s", fontsize=10)  # fmt: skip
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def step_figure(labels: list[str], measured: list[float], models: dict[str, list[float]]):
    """Measured DDP step times beside each model's prediction."""
    fig, ax = plt.subplots(figsize=(8, 3.8))
    width = 0.8 / (1 + len(models))
    positions = range(len(labels))
    ax.bar(
        [p - 0.4 + width / 2 for p in positions],
        [m * 1e3 for m in measured],
        width,
        label="measured",
    )
    for k, (name, values) in enumerate(models.items(), start=1):
        ax.bar(
            [p - 0.4 + width * (k + 0.5) for p in positions],
            [v * 1e3 for v in values],
            width,
            label=name,
        )
    ax.set_xticks(list(positions), labels, fontsize=8)
    ax.set_ylabel("time per step (ms)")
    ax.set_title("DDP step times: measured, and each model's prediction", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def timeline_figure(timeline, title: str):
    """One step: forward, backward, each bucket's all-reduce; what sticks out past the
    backward pass is the communication the step waits for."""
    fig, ax = plt.subplots(figsize=(8, 2.4))
    f = timeline.forward * 1e3
    ax.broken_barh([(0, f)], (2, 0.8), color="tab:blue")
    ax.broken_barh([(f, timeline.backward * 1e3)], (2, 0.8), color="tab:cyan")
    ax.text(f / 2, 2.4, "forward", ha="center", va="center", fontsize=8)
    ax.text(f + timeline.backward * 5e2, 2.4, "backward", ha="center", va="center", fontsize=8)
    for k, (start, end, _) in enumerate(timeline.buckets):
        ax.broken_barh(
            [(f + start * 1e3, (end - start) * 1e3)],
            (1, 0.8),
            color="tab:orange" if k % 2 else "tab:red",
        )
    ax.axvline(f + timeline.backward * 1e3, color="black", linestyle=":", linewidth=1)
    ax.set_yticks([1.4, 2.4], ["all-reduces", "compute"])
    ax.set_xlabel("time in the step (ms)")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def tokens(count: float) -> str:
    return f"{count / 2**20:g}M" if count >= 2**20 else f"{count / 2**10:g}K"


def efficiency_figure(model, sequences_per_gpu: int):
    """Weak scaling (the batch per GPU fixed, so the global batch grows with the GPUs):
    scaling efficiency against the number of GPUs, a panel per network, a curve per
    all-reduce algorithm; each tick says its global batch."""
    gpus = gpu_counts()
    fig, axes = plt.subplots(1, len(CLUSTERS), figsize=(10, 3.8), sharey=True)
    for ax, cluster in zip(axes, CLUSTERS, strict=True):
        for algorithm, style in zip(ALGORITHMS, ("-o", ":^", ":s", "--v"), strict=True):
            efficiency = [predict(model, g, cluster, sequences_per_gpu, algorithm)[1]
                          for g in gpus]  # fmt: skip
            ax.plot(
                gpus,
                efficiency,
                style,
                label=algorithm,
                linewidth=2.5 if "NCCL" in algorithm else 1,
            )
        ax.set_xscale("log", base=2)
        batch = [tokens(g * sequences_per_gpu * model.context) for g in gpus]
        ax.set_xticks(gpus, [f"{g}\n{b}" for g, b in zip(gpus, batch, strict=True)], fontsize=7)
        ax.set_title(cluster.name, fontsize=9)
        ax.set_xlabel("GPUs (8 per machine)\nand the global batch in tokens")
    axes[0].set_ylim(0, 1.05)
    axes[0].set_ylabel("scaling efficiency (compute / step)")
    axes[0].legend(fontsize=7, loc="lower left")
    fig.suptitle(f"{model.name}, {sequences_per_gpu} x {model.context} tokens per GPU: predicted "
                 "from datasheet figures, not measured", fontsize=10)  # fmt: skip
    fig.tight_layout()
    return fig


def strong_scaling_figure(model, cluster, sequences_per_gpu: int, global_batches: list[int]):
    """Scaling efficiency against the number of GPUs, with the batch per GPU fixed and
    with each fixed global batch (tokens): the fewer tokens per GPU, the less compute
    there is to hide the all-reduce behind."""
    gpus = gpu_counts()
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    weak = [predict(model, g, cluster, sequences_per_gpu)[1] for g in gpus]
    ax.plot(gpus, weak, "-o", label=f"{sequences_per_gpu} sequences per GPU (global batch grows)")
    for batch in global_batches:
        efficiency = [strong_scaling(model, g, cluster, batch) for g in gpus]
        shown = [(g, e) for g, e in zip(gpus, efficiency, strict=True) if e is not None]
        ax.plot(*zip(*shown, strict=True), "--s", label=f"global batch {tokens(batch)} tokens")
    ax.set_xscale("log", base=2)
    ax.set_xticks(gpus, [str(g) for g in gpus])
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("GPUs (8 per machine)")
    ax.set_ylabel("scaling efficiency (compute / step)")
    ax.set_title(f"{model.name}, {cluster.name}, NCCL's choice: predicted", fontsize=10)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    return fig
