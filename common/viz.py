"""Figures for 01_theory: the ring all-reduce step by step (a grid and an animation),
the traffic of ring vs reduce-then-broadcast, the all-reduce benchmark, and DDP's
gradient buckets on a timeline.

Introduced in 01_theory; the bucket timeline is also used by 02_multigpu's part 3
(DDP with torch.compile). Every figure is drawn from data: a `common.ring_sim.Record`,
benchmark rows, or the events a script recorded.
"""

import math

import matplotlib.pyplot as plt
from matplotlib import animation, colors
from matplotlib.patches import FancyArrowPatch, Rectangle

from common.ring_sim import Record, simulate_reduce_then_broadcast, simulate_ring_all_reduce

CELL = 0.28  # width of one chunk's square, in axes units around a ring of radius 1


def _rank_position(rank: int, world_size: int) -> tuple[float, float]:
    angle = math.pi / 2 - 2 * math.pi * rank / world_size  # rank 0 on top, clockwise
    return math.cos(angle), math.sin(angle)


def draw_ring_step(ax, record: Record, index: int) -> None:
    """One panel: the ranks on a ring, each with its chunks coloured by how many ranks'
    inputs they hold (white: its own only; dark: the full sum), and an arrow per
    message of this step, labelled with the chunk it carries."""
    world_size, step = record.world_size, record.steps[index]
    cmap = plt.get_cmap("Blues")
    norm = colors.Normalize(vmin=0, vmax=world_size)
    ax.clear()
    ax.set_xlim(-1.75, 1.75)
    ax.set_ylim(-1.6, 1.75)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(record.step_title(index), fontsize=10)
    chunk_count = len(step.chunks[0])
    for rank in range(world_size):
        x, y = _rank_position(rank, world_size)
        left = x - CELL * chunk_count / 2
        ax.text(x, y + CELL * 0.95, f"rank {rank}", ha="center", va="bottom", fontsize=8)
        for chunk in range(chunk_count):
            held = step.contributors[rank][chunk]
            done = len(held) == world_size
            ax.add_patch(
                Rectangle(
                    (left + chunk * CELL, y - CELL / 2),
                    CELL,
                    CELL,
                    facecolor=cmap(norm(len(held) - 0.6)),
                    edgecolor="black",
                    linewidth=1.6 if done else 0.6,
                )
            )
            ax.text(
                left + (chunk + 0.5) * CELL,
                y,
                "Σ" if done else "".join(str(r) for r in sorted(held)),
                ha="center",
                va="center",
                fontsize=7 if len(held) < 3 else 5.5,
                color="white" if len(held) > world_size / 2 else "black",
            )
    for transfer in step.transfers:
        start = _rank_position(transfer.sender, world_size)
        end = _rank_position(transfer.receiver, world_size)
        ax.add_patch(
            FancyArrowPatch(
                start,
                end,
                connectionstyle="arc3,rad=-0.35",
                arrowstyle="-|>",
                mutation_scale=12,
                color="tab:orange",
                linewidth=1.5,
                shrinkA=18,
                shrinkB=18,
            )
        )
        middle_x, middle_y = (start[0] + end[0]) / 2, (start[1] + end[1]) / 2
        scale = 1.35 if world_size > 2 else 1.0
        label_x = middle_x * scale if world_size > 2 else middle_x + 0.45
        label_y = middle_y * scale
        ax.text(
            label_x,
            label_y,
            f"chunk {transfer.chunk}",
            fontsize=7,
            color="tab:orange",
            ha="center",
            va="center",
        )


def ring_figure_grid(record: Record, columns: int = 4):
    """Every step of a simulated ring all-reduce, one panel each, in reading order."""
    panels = len(record.steps)
    rows = math.ceil(panels / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 3.1 * rows), squeeze=False)
    for index, ax in enumerate(axes.flat):
        if index < panels:
            draw_ring_step(ax, record, index)
        else:
            ax.axis("off")
    fig.suptitle(
        f"Ring all-reduce on {record.world_size} ranks: digits = ranks whose input a chunk "
        "holds, Σ = the full sum",
        fontsize=11,
    )
    fig.tight_layout()
    return fig


def ring_animation(record: Record, interval_ms: int = 1200):
    """The same steps as an animation. In a notebook:
    `HTML(animation_html(ring_animation(record), description))` (`common.figure_text`)."""
    fig, ax = plt.subplots(figsize=(5, 4.8))

    def frame(index):
        draw_ring_step(ax, record, index)
        return []

    movie = animation.FuncAnimation(
        fig, frame, frames=len(record.steps), interval=interval_ms, blit=False, repeat=True
    )
    plt.close(fig)  # the animation shows the frames; the empty figure would show twice
    return movie


def traffic_figure(world_sizes, chunk: int = 100):
    """Elements the busiest rank sends, per element of the tensor, counted from the two
    simulations (dots) and as formulas (lines): the ring stays under 2, the
    reduce-to-one-then-broadcast root grows as N - 1. Each tensor has `chunk` x N
    elements, so that N divides it."""
    import torch  # only this figure needs tensors

    ring, naive = [], []
    for world_size in world_sizes:
        numel = chunk * world_size
        inputs = [torch.ones(numel) for _ in range(world_size)]
        ring.append(max(simulate_ring_all_reduce(inputs).elements_sent()) / numel)
        naive.append(max(simulate_reduce_then_broadcast(inputs).elements_sent()) / numel)
    fig, ax = plt.subplots(figsize=(6.4, 4))
    ax.plot(world_sizes, [2 * (n - 1) / n for n in world_sizes], color="tab:blue", alpha=0.5)
    ax.plot(world_sizes, ring, "o", color="tab:blue", label="ring: 2(N-1)/N")
    ax.plot(world_sizes, [n - 1 for n in world_sizes], color="tab:red", alpha=0.5)
    ax.plot(world_sizes, naive, "s", color="tab:red", label="reduce to rank 0, broadcast: N-1")
    ax.set_xlabel("number of ranks N")
    ax.set_ylabel("data sent by the busiest rank\n(multiples of the tensor size)")
    ax.set_title("Traffic per rank: the ring's stays flat as N grows")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig, ring, naive


def bandwidth_figure(rows_by_world_size: dict[int, list[dict]]):
    """Bus bandwidth against tensor size for the library and the ring, per world size."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    styles = {"all_reduce": "-", "ring": "--", "straightforward": ":"}
    for (world_size, rows), color in zip(
        sorted(rows_by_world_size.items()), ["tab:blue", "tab:green", "tab:purple"], strict=False
    ):
        sizes = [row["bytes"] / 2**20 for row in rows]
        for name, style in styles.items():
            if f"{name}_busbw" in rows[0]:
                label = {"all_reduce": "dist.all_reduce", "ring": "our ring"}.get(
                    name, "straightforward ring"
                )
                values = [row[f"{name}_busbw"] for row in rows]
                ax.plot(
                    sizes, values, style, marker="o", color=color, label=f"{label}, N={world_size}"
                )
    ax.set_xscale("log", base=2)
    ticks = sorted({row["bytes"] / 2**20 for rows in rows_by_world_size.values() for row in rows})
    ax.set_xticks(ticks, [f"{t:g} MB" if t >= 1 else f"{t * 1024:g} KB" for t in ticks], fontsize=8)
    ax.set_xlabel("tensor size (log scale)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title("All-reduce on gloo: hand-written ring vs the library")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def bucket_timeline(events: list[dict], title: str):
    """DDP's backward pass on a time axis: a tick per gradient hook (parameter ready),
    a bar per bucket from its all-reduce launch to its completion; and, where the
    events hold some ("piece", from 02_multigpu's torch.compile script), a tick where
    each compiled graph's backward pass began."""
    start = min(event["time"] for event in events)
    pieces = [event for event in events if event["kind"] == "piece"]
    hooks = [event for event in events if event["kind"] == "grad_ready"]
    buckets = sorted(
        (event for event in events if event["kind"] == "bucket_launch"), key=lambda e: e["index"]
    )
    backward_end = [event for event in events if event["kind"] == "backward_end"]
    tick_rows = [("gradient ready", hooks)] + (
        [("compiled backward begins", pieces)] if pieces else []
    )
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.45 * (len(buckets) + len(tick_rows))))
    for row, (_, ticks) in enumerate(tick_rows):
        for tick in ticks:
            ms = (tick["time"] - start) * 1e3
            ax.plot([ms, ms], [row - 0.3, row + 0.3], color="tab:gray", linewidth=1.2)
    palette = plt.get_cmap("tab10")
    for row, bucket in enumerate(buckets, start=len(tick_rows)):
        launch = (bucket["time"] - start) * 1e3
        done = (bucket["done"] - start) * 1e3
        ax.barh(row, max(done - launch, 0.05), left=launch, height=0.6, color=palette(row % 10))
    labels = [label for label, _ in tick_rows] + [
        f"bucket {b['index']} ({b['numel'] * 4 / 2**20:.1f} MB)" for b in buckets
    ]
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.invert_yaxis()
    for event in backward_end:
        ms = (event["time"] - start) * 1e3
        ax.axvline(ms, color="black", linestyle="--", linewidth=1)
        ax.text(ms, len(labels) - 0.4, "backward() returns ", fontsize=8, va="bottom", ha="right")
    origin = "the backward pass began" if pieces else "the first gradient was ready"
    ax.set_xlabel(f"time since {origin} (ms); bar = all-reduce in flight")
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig
