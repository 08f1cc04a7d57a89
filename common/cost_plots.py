"""The figures of 01_theory, part 2 (`01_theory_at_scale.ipynb`): the alpha-beta model
against this machine's measurements, a DDP step's timeline, and the predictions for
GPUs (`common.at_scale`). One idea per figure, axes labelled with their units."""

import matplotlib.pyplot as plt

from common.at_scale import NETWORKS, gpu_counts, predict
from common.cost_model import Link, ring_seconds


def fit_figure(rows: list[dict], name: str, link: Link, held_out: int):
    """Measured times of `name` (the benchmark's "all_reduce" or "ring"; points: each
    size's fastest call, the one fitted; bars: up to its slowest) and the fitted model
    (lines), per world size; the world size the fit never saw drawn with open points."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for world_size in sorted({r["world_size"] for r in rows}):
        mine = sorted((r for r in rows if r["world_size"] == world_size), key=lambda r: r["bytes"])
        sizes = [r["bytes"] for r in mine]
        (line,) = ax.plot(
            sizes,
            [ring_seconds(n, world_size, link) * 1e3 for n in sizes],
            label=f"model, {world_size} processes",
        )
        fastest = [r[f"{name}_fastest"] * 1e3 for r in mine]
        above = [r[f"{name}_slowest"] * 1e3 - f for f, r in zip(fastest, mine, strict=True)]
        open_points = world_size == held_out
        ax.errorbar(
            sizes,
            fastest,
            yerr=[[0] * len(fastest), above],
            fmt="o",
            capsize=2,
            color=line.get_color(),
            fillstyle="none" if open_points else "full",
            label=f"measured, {world_size}" + (" (not fitted on)" if open_points else ""),
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tensor size (bytes)")
    ax.set_ylabel(f"{name} time (ms): fastest, bar to slowest")
    ax.set_title(f"alpha = {link.alpha * 1e6:.0f} us, bandwidth = {link.bandwidth / 1e9:.2f} GB/s")
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


def efficiency_figure(model, algorithms=("flat ring", "two-level ring", "tree")):
    """Scaling efficiency (compute / step time) against the number of GPUs, for each
    network between machines and each all-reduce algorithm."""
    fig, ax = plt.subplots(figsize=(9.5, 4.2))
    gpus = gpu_counts()
    for (name, network), style in zip(NETWORKS.items(), ("-", "--"), strict=False):
        for algorithm, marker in zip(algorithms, "o^s", strict=False):
            efficiency = [predict(model, g, network, algorithm)[1] for g in gpus]
            ax.plot(gpus, efficiency, style, marker=marker, label=f"{name}, {algorithm}")
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("GPUs (8 per machine)")
    ax.set_ylabel("scaling efficiency (compute / step)")
    ax.set_title(f"{model.name}: predicted, from datasheet figures (not measured)", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig
