"""Lesson 02, DDP's options: parameters a forward pass does not use.

`BranchyModel` has a branch, `aux`, that its forward pass skips when told to. DDP
all-reduces a bucket once every gradient in it is ready; a parameter that took no part
in the loss never gets a gradient, so its bucket never becomes ready. Four ways to
train with it, each on the same data:

- `default`: plain DDP, `aux` skipped on step 1 (on every rank): DDP raises at the
  *next* forward pass, on every rank, naming the parameters that got no gradient;
- `find_unused`: `find_unused_parameters=True`: after each forward pass DDP walks the
  autograd graph from the outputs and marks what it cannot reach as ready; after the
  backward pass it all-reduces which parameters each rank used, and leaves `.grad` at
  None only for one no rank used (also run with `aux` skipped on rank 1 alone, and with
  `aux` never used, to read `can_set_static_graph` from DDP's logging data);
- `always_used`: the branch kept in the graph with a zero weight on the skipped steps;
- `static_graph`: `aux` never used, and DDP told that this never changes.

First, what `find_unused_parameters=True` costs on a model that uses every parameter:
the time per step with it off and on, the collectives per step (the process group's
sequence number counts them) and whether DDP rebuilt its buckets after the first step
(it never does with the option on); and DDP warns, once per process, that it found
nothing unused.

Launch it (from any folder, with the path to this file):

    torchrun --standalone --nproc_per_node=2 unused_parameters.py
    torchrun --standalone --nproc_per_node=2 unused_parameters.py --layers 64 --timed-steps 40
"""

import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from common.cli import LessonArgumentParser, positive_int
from common.data import IN_FEATURES, SyntheticRegression
from common.distributed import device_for, end_process, log, log0, torchrun_env
from common.replicas import flat_parameters, largest_difference_between_ranks

LAUNCH = "torchrun --standalone --nproc_per_node=2 unused_parameters.py [--layers 64]"
STEPS, BATCH_SIZE, HIDDEN = 6, 16, 16


class BranchyModel(nn.Module):
    """trunk -> (+ aux, on the steps that use it) -> head."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.trunk = nn.Linear(IN_FEATURES, HIDDEN)
        self.aux = nn.Linear(HIDDEN, HIDDEN)
        self.head = nn.Linear(HIDDEN, 1)

    def forward(self, x: torch.Tensor, use_aux: bool, keep_aux_in_graph: bool = False):
        h = torch.relu(self.trunk(x))
        if use_aux:
            h = h + self.aux(h)
        elif keep_aux_in_graph:
            # Zero times each aux parameter: its gradient is an exact 0, and DDP sees it.
            h = h + 0.0 * sum(p.sum() for p in self.aux.parameters())
        return self.head(h)


def batch(step: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's batch of step `step`."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    data = SyntheticRegression(size=STEPS * world_size * BATCH_SIZE)
    start = (step * world_size + rank) * BATCH_SIZE
    end = start + BATCH_SIZE
    return data.inputs[start:end].to(device), data.targets[start:end].to(device)


def train(
    mode: str, device: torch.device, steps_done: list | None = None, notes: dict | None = None
) -> torch.Tensor:
    """Train STEPS steps in `mode`; return the weights (raises where DDP does, after
    appending each completed step to `steps_done`). `notes` gets whether aux's `.grad`
    was None after step 1, and DDP's logging data's `can_set_static_graph`."""
    model = DDP(
        BranchyModel().to(device),
        device_ids=[device.index] if device.type == "cuda" else None,
        find_unused_parameters=mode.startswith("find_unused"),
        static_graph=(mode == "static_graph"),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(STEPS):
        # Unless said otherwise, the same steps skip aux on every rank.
        use_aux = {
            "static_graph": False,
            "find_unused_never": False,
            "find_unused_rank_1": not (step == 1 and dist.get_rank() == 1),
        }.get(mode, step % 2 == 0)
        inputs, targets = batch(step, device)
        optimizer.zero_grad()
        output = model(inputs, use_aux=use_aux, keep_aux_in_graph=(mode == "always_used"))
        F.mse_loss(output, targets).backward()
        if step == 1 and notes is not None:
            notes["grad_none"] = model.module.aux.weight.grad is None
        optimizer.step()
        if steps_done is not None:
            steps_done.append(step)
    if notes is not None:
        notes["can_set_static_graph"] = model._get_ddp_logging_data().get("can_set_static_graph")
    return flat_parameters(model.module)


def show_the_error(device: torch.device) -> None:
    """Plain DDP with aux skipped on step 1: print what DDP raises, and where."""
    steps_done = []
    try:
        train("default", device, steps_done)
    except RuntimeError as error:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        log0(f"default: steps {steps_done} ran; step {len(steps_done)} raised RuntimeError:")
        for line in lines:
            if not line.startswith("Parameter indices"):
                log0(f"    {line}")
        # The one line that differs between ranks: each rank names its own parameters.
        indices = next(line for line in lines if line.startswith("Parameter indices"))
        names = [name for name, _ in BranchyModel().named_parameters()]
        missing = [names[int(i)] for i in indices.split(":")[1].split()]
        log(f"{indices} = {', '.join(missing)}")
        return
    raise SystemExit("default: DDP raised no error although aux got no gradient on step 1")


def seconds_per_step(find_unused: bool, layers: int, steps: int, device) -> tuple:
    """Median time of a training step of a deep narrow model that uses every parameter,
    where DDP's graph traversal weighs most against the (tiny) computation; the
    collectives of the last step; whether DDP rebuilt its buckets."""
    torch.manual_seed(0)
    deep = nn.Sequential(*(nn.Linear(HIDDEN, HIDDEN) for _ in range(layers))).to(device)
    model = DDP(
        deep,
        device_ids=[device.index] if device.type == "cuda" else None,
        find_unused_parameters=find_unused,
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    inputs = torch.randn(BATCH_SIZE, HIDDEN, device=device)
    times = []
    for _ in range(steps + 3):  # the first steps build buckets and warm up: not timed
        dist.barrier()
        collectives = dist.group.WORLD._get_sequence_number_for_group()
        started = time.perf_counter()
        optimizer.zero_grad()
        model(inputs).square().mean().backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - started)
        collectives = dist.group.WORLD._get_sequence_number_for_group() - collectives
    rebuilt = model._get_ddp_logging_data()["has_rebuilt_buckets"]
    return statistics.median(times[3:]), collectives, rebuilt


def main() -> None:
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument("--layers", type=positive_int, default=64, help="depth of the timed model")
    parser.add_argument(
        "--timed-steps", type=positive_int, default=40, help="steps timed per setting"
    )
    args = parser.parse_args()
    local_rank, _, world_size = torchrun_env(launch_hint=LAUNCH)
    device = device_for(local_rank)
    dist.init_process_group(
        backend=dist.get_default_backend_for_device(device),
        device_id=device if device.type == "cuda" else None,  # nccl: this GPU, connect now
    )

    # First, so that DDP's warning (printed once per process) comes from the timed
    # model, which uses every parameter.
    cost = {
        flag: seconds_per_step(flag, args.layers, args.timed_steps, device)
        for flag in (False, True)
    }
    times = {flag: seconds for flag, (seconds, _, _) in cost.items()}
    log0(
        f"cost, {args.layers} layers, nothing unused: find_unused_parameters=False "
        f"{times[False] * 1e3:.2f} ms/step | True {times[True] * 1e3:.2f} ms/step "
        f"| ratio {times[True] / times[False]:.2f}"
    )
    log0(
        f"cost | collectives per step: find_unused_parameters=False {cost[False][1]}, "
        f"True {cost[True][1]} | buckets rebuilt after step 0: False {cost[False][2]}, "
        f"True {cost[True][2]}"
    )
    show_the_error(device)
    notes = {mode: {} for mode in ("find_unused", "find_unused_rank_1", "find_unused_never")}
    weights = {
        mode: train(mode, device, notes=notes.get(mode))
        for mode in ("find_unused", "always_used", "static_graph")
    }
    for mode, flat in weights.items():
        spread = largest_difference_between_ranks(flat)
        log0(f"{mode}: trained {STEPS} steps | max |w - w on rank 0| over ranks {spread:.1e}")
    same = torch.equal(weights["find_unused"], weights["always_used"])
    log0(f"always_used ends with the weights of find_unused, bit for bit: {same}")
    for mode in ("find_unused_rank_1", "find_unused_never"):
        train(mode, device, notes=notes[mode])
    log0(
        "find_unused: aux.weight.grad after step 1, aux skipped by every rank: "
        f"{'None' if notes['find_unused']['grad_none'] else 'a tensor'}"
    )
    if dist.get_rank() == 1:
        grad_none = notes["find_unused_rank_1"]["grad_none"]
        log(f"find_unused: skipped by rank 1 alone: {'None' if grad_none else 'a tensor'}")
    log0(
        "find_unused: can_set_static_graph in DDP's logging data after training: aux "
        f"skipped on some steps {notes['find_unused']['can_set_static_graph']} | aux never "
        f"used {notes['find_unused_never']['can_set_static_graph']}"
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    end_process()  # not Python's teardown: see common.distributed.end_process
