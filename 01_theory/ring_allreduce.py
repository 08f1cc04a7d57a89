"""Lesson 01: the hand-written ring all-reduce, checked against `dist.all_reduce` and
benchmarked beside it.

First every rank fills random tensors of awkward sizes (1 element, fewer elements
than ranks, sizes that N does not divide) in several dtypes; the ring's sum must equal
the library's. Then both run on float32 tensors from `--min-size` to `--max-size`,
`--repeats` times each, alternating ring and library so that a busy machine slows
both alike, and rank 0 prints the median time, the algorithm bandwidth (tensor bytes
/ time) and the bus bandwidth (algbw x 2(N-1)/N: the bytes each rank really moves,
comparable across N), and the ratio ring / library.

Launch it (from any folder, with the path to this file):

    torchrun --standalone --nproc_per_node=2 ring_allreduce.py
    torchrun --standalone --nproc_per_node=4 ring_allreduce.py --repeats 15
    torchrun --standalone --nproc_per_node=2 ring_allreduce.py --max-size 16MB --straightforward

`--straightforward` also times the first, slow version of the ring
(`common.ring.ring_all_reduce_straightforward`) and counts the page faults each version
takes per call; `--piece-size 0` times the ring sending whole chunks instead of 1 MB
pieces; `--out FILE` writes the results as JSON for plotting. The machine's load
average comes first: on a busy machine, run it again before trusting a ratio.
"""

import json
import os
import resource
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist

from common.cli import LessonArgumentParser
from common.distributed import device_for, end_process, log0, torchrun_env
from common.ring import PIECE_BYTES, ring_all_reduce, ring_all_reduce_straightforward

LAUNCH = "torchrun --standalone --nproc_per_node=2 ring_allreduce.py"
UNITS = {"B": 1, "KB": 2**10, "MB": 2**20, "GB": 2**30}
CHECK_DTYPES = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int32,
    torch.int64,
)


def size_in_bytes(text: str) -> int:
    """'4KB' -> 4096, '64MB' -> 67108864 (powers of 1024)."""
    for unit in sorted(UNITS, key=len, reverse=True):
        if text.upper().endswith(unit) and text[: -len(unit)].strip().isdigit():
            return int(text[: -len(unit)]) * UNITS[unit]
    raise ValueError(f"{text!r} is not a size such as 4KB, 1MB or 64MB")


def human(size: int) -> str:
    for unit in ("GB", "MB", "KB"):
        if size >= UNITS[unit] and size % UNITS[unit] == 0:
            return f"{size // UNITS[unit]}{unit}"
    return f"{size}B"


def awkward_sizes(world_size: int) -> list[int]:
    """Sizes that break a ring written only for the easy case (none empty: a world of
    one process would otherwise check a tensor of 0 elements)."""
    sizes = {1, world_size - 1, world_size, world_size + 1, 2 * world_size + 1, 1000, 100_003}
    return sorted(size for size in sizes if size > 0)


def random_tensor(numel: int, dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    if dtype.is_floating_point and torch.finfo(dtype).bits > 16:
        return torch.randn(numel, generator=generator, dtype=torch.float64).to(dtype)
    # Small integers: their sums are exact in every dtype, so ring and library must
    # agree bit for bit whatever order they add in (fp16 and bf16 included).
    return torch.randint(-8, 9, (numel,), generator=generator).to(dtype)


def check_against_library(world_size: int, global_rank: int, device: torch.device) -> None:
    generator = torch.Generator().manual_seed(1234 + global_rank)  # different data per rank
    for dtype in CHECK_DTYPES:
        for numel in awkward_sizes(world_size):
            ours = random_tensor(numel, dtype, generator).to(device)
            library = ours.clone()
            ring_all_reduce(ours)
            dist.all_reduce(library)
            # float32/float64 random sums: the ring adds in another order than the
            # library, so the last bits may differ; everything else must be exact.
            exact = not (dtype.is_floating_point and torch.finfo(dtype).bits > 16)
            if exact:
                torch.testing.assert_close(ours, library, rtol=0, atol=0)
            else:
                torch.testing.assert_close(ours, library)
            difference = (ours.double() - library.double()).abs().max().item()
            log0(
                f"check numel={numel} dtype={str(dtype).removeprefix('torch.')}: "
                f"ring == all_reduce (max |difference| {difference:.1e})"
            )


def page_faults() -> int:
    """Minor page faults of this process so far: each is a fresh page of memory being
    touched for the first time (what a newly allocated big buffer costs)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def timed(all_reduce, work: torch.Tensor, source: torch.Tensor) -> tuple[float, int]:
    """Seconds for one call, the slowest rank's (the collective is done when all are),
    and the page faults this rank took during it."""
    work.copy_(source)
    dist.barrier()
    faults_before = page_faults()
    started = time.perf_counter()
    all_reduce(work)
    if work.device.type == "cuda":
        torch.cuda.synchronize(work.device)
    seconds = torch.tensor([time.perf_counter() - started], device=work.device)
    faults = page_faults() - faults_before
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
    return seconds.item(), faults


def bus_factor(world_size: int) -> float:
    """Bytes each rank sends in a ring all-reduce, per byte of the tensor: N-1 chunks
    of 1/N in the reduce-scatter, N-1 more in the all-gather, so 2(N-1)/N."""
    return 2 * (world_size - 1) / world_size


def benchmark(sizes, repeats, straightforward, piece_bytes, world_size, device) -> list[dict]:
    contenders = {
        "all_reduce": dist.all_reduce,
        "ring": lambda tensor: ring_all_reduce(tensor, piece_bytes),
    }
    if straightforward:
        contenders["straightforward"] = ring_all_reduce_straightforward
    generator = torch.Generator().manual_seed(0)
    pieces = f"pieces of {human(piece_bytes)}" if piece_bytes else "whole chunks"
    log0(
        f"benchmark: world_size={world_size}, float32, median of {repeats}, ring in {pieces}, "
        f"busbw = algbw x 2(N-1)/N = algbw x {bus_factor(world_size):.2f}"
    )
    header = (
        f"{'size':>6} {'all_reduce ms':>14} {'algbw GB/s':>11} {'busbw GB/s':>11} "
        f"{'ring ms':>9} {'busbw GB/s':>11}"
    )
    header += f" {'ring/lib':>9}"
    if straightforward:
        header += f" {'straightfwd/lib':>16} {'page faults per call: ring, straightfwd':>40}"
    log0(header)
    rows = []
    for size in sizes:
        source = torch.randn(size // 4, generator=generator).to(device)
        work = torch.empty_like(source)
        times = {name: [] for name in contenders}
        faults = {name: [] for name in contenders}
        for all_reduce in contenders.values():
            all_reduce(work)  # warm-up: connections, buffers
        names = list(contenders)
        for repeat in range(repeats):
            # Alternate, so a busy moment slows every contender, and rotate who goes
            # first, so that none always runs right after the same other one.
            shift = repeat % len(names)
            for name in names[shift:] + names[:shift]:
                seconds, page_faults_taken = timed(contenders[name], work, source)
                times[name].append(seconds)
                faults[name].append(page_faults_taken)
        row = {"bytes": size, "world_size": world_size}
        for name in contenders:
            seconds = statistics.median(times[name])
            row[f"{name}_seconds"] = seconds
            row[f"{name}_fastest"], row[f"{name}_slowest"] = min(times[name]), max(times[name])
            row[f"{name}_algbw"] = size / seconds / 1e9
            row[f"{name}_busbw"] = row[f"{name}_algbw"] * bus_factor(world_size)
            row[f"{name}_page_faults"] = statistics.median(faults[name])
        row["ratio"] = row["ring_busbw"] / row["all_reduce_busbw"]
        line = (
            f"{human(size):>6} {row['all_reduce_seconds'] * 1e3:>14.3f} "
            f"{row['all_reduce_algbw']:>11.3f} {row['all_reduce_busbw']:>11.3f} "
            f"{row['ring_seconds'] * 1e3:>9.3f} "
            f"{row['ring_busbw']:>11.3f} {row['ratio']:>9.2f}"
        )
        if straightforward:
            row["straightforward_ratio"] = row["straightforward_busbw"] / row["all_reduce_busbw"]
            line += f" {row['straightforward_ratio']:>16.2f} "
            line += f"{row['ring_page_faults']:>31g}, {row['straightforward_page_faults']:g}"
        log0(line)
        rows.append(row)
    return rows


def main():
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument("--min-size", default="4KB", help="smallest tensor (default 4KB)")
    parser.add_argument("--max-size", default="64MB", help="largest tensor (default 64MB)")
    parser.add_argument("--repeats", type=int, default=9, help="timed calls per size (median)")
    parser.add_argument("--straightforward", action="store_true", help="also time the slow ring")
    parser.add_argument("--skip-check", action="store_true", help="benchmark only")
    parser.add_argument(
        "--piece-size",
        default=human(PIECE_BYTES),
        help=f"the ring sends each chunk in pieces this big on the CPU "
        f"(default {human(PIECE_BYTES)}; 0 for whole chunks)",
    )
    parser.add_argument("--out", type=Path, help="write the benchmark results here as JSON")
    args = parser.parse_args()
    try:
        smallest, largest = size_in_bytes(args.min_size), size_in_bytes(args.max_size)
        piece_bytes = 0 if args.piece_size.strip() == "0" else size_in_bytes(args.piece_size)
    except ValueError as error:
        parser.error(str(error))
    if not 4 <= smallest <= largest:
        parser.error(f"--min-size {args.min_size} must be at least 4B and at most --max-size")
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, not {args.repeats}")
    local_rank, global_rank, world_size = torchrun_env(launch_hint=LAUNCH)

    device = device_for(local_rank)
    dist.init_process_group(
        backend=dist.get_default_backend_for_device(device),
        device_id=device if device.type == "cuda" else None,  # nccl: this GPU, connect now
    )
    if not args.skip_check:
        check_against_library(world_size, global_rank, device)
        log0(f"the ring equals dist.all_reduce on {world_size} ranks: every size, every dtype")

    if world_size == 1:  # bus bandwidth = algbw x 2(N-1)/N = 0: nothing to time
        log0("no benchmark: a world of 1 process sends nothing (launch 2 or more to time it)")
        dist.destroy_process_group()
        return
    sizes, size = [], smallest
    while size <= largest:  # powers of 4: 4KB, 16KB, 64KB, ...
        sizes.append(size)
        size *= 4
    # The machine's load average first: a busy machine makes every figure below noisy.
    one, five, fifteen = os.getloadavg()
    log0(
        f"load average {one:.2f} {five:.2f} {fifteen:.2f} (1, 5, 15 min) on "
        f"{os.cpu_count()} CPUs, {world_size} processes"
    )
    rows = benchmark(sizes, args.repeats, args.straightforward, piece_bytes, world_size, device)
    if args.out and global_rank == 0:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1))
        log0(f"wrote {args.out}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    end_process()  # not Python's teardown: see common.distributed.end_process
