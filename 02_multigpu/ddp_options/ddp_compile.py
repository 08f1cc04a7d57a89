"""Lesson 02, DDP's options: DDP and `torch.compile`.

`torch.compile` turns a model's forward pass into graphs that a backend compiles;
AOTAutograd then runs each graph's backward pass as a single autograd node. DDP
launches a bucket's all-reduce once all its gradients are ready, so one graph for the
whole model would give every gradient at once, at the very end of the backward pass:
no communication would overlap computation any more. DDP's partner in the compiler,
the *DDPOptimizer* (`torch._dynamo.config.optimize_ddp`), splits the graph at DDP's
bucket boundaries instead, so that each piece's backward ends with its buckets ready.

Five ways to train the same layers for a few steps, with bucket_cap_mb=4 so that
they have several buckets. `Stack` is a small model class of our own; `Sequential`
is the same layers as a bare `nn.Sequential`:

- `eager`:                 `DDP(Stack())`, no compile: the reference;
- `compile_then_wrap`:     `model.compile()`, then `DDP(model)`: the order PyTorch's
  docs recommend ("Where to apply torch.compile?": compile the inner module passed to
  the wrapper, since torch.compile does not handle wrappers like DDP well);
- `compile_then_wrap, optimize_ddp=False`: the same without the DDPOptimizer;
- `wrap_then_compile`:     `torch.compile(DDP(Stack()))`;
- `wrap_then_compile, Sequential`: `torch.compile(DDP(nn.Sequential(...)))`. Dynamo
  stops at a graph break in DDP's forward and resumes in the frames DDP calls; it
  compiles the frame of `Stack.forward`, our file, but skips the frames of torch's own
  files, such as `nn.Sequential.forward`: that model runs uncompiled (0 graphs).

Whichever way, a frame compiled while DDP's forward is running gets the DDPOptimizer
(`torch/_dynamo/convert_frame.py` asks `DDP._get_active_ddp_module()`).
`model.compile()` compiles in place: the state dict keeps its names, where
`torch.compile(model)` returns a wrapper whose keys start with `_orig_mod.`.

The backend is `aot_eager` by default (AOTAutograd without code generation: it needs
no C++ compiler, and compiles in seconds); `--backend inductor` is the default of
`torch.compile`, and on the CPU needs a C++ compiler.

Launch it (from any folder, with the path to this file):

    torchrun --standalone --nproc_per_node=2 ddp_compile.py
    torchrun --standalone --nproc_per_node=2 ddp_compile.py --backend inductor
    torchrun --standalone --nproc_per_node=2 ddp_compile.py --events events.json
"""

import json
import time
from pathlib import Path

import torch
import torch._dynamo
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from common.cli import LessonArgumentParser
from common.distributed import device_for, end_process, log0, torchrun_env
from common.replicas import flat_parameters

LAUNCH = (
    "torchrun --standalone --nproc_per_node=2 ddp_compile.py [--backend inductor] "
    "[--events events.json]"
)
WIDTH, LAYERS, STEPS = 1024, 6, 3  # a 1024 x 1024 layer: 4 MB of float32 gradients
BUCKET_MB = 4  # about a layer per bucket
WAYS = (
    "eager",
    "compile_then_wrap",
    "compile_then_wrap, optimize_ddp=False",
    "wrap_then_compile",
    "wrap_then_compile, Sequential",
)


def make_layers() -> nn.Sequential:
    torch.manual_seed(0)
    stack = [m for _ in range(LAYERS) for m in (nn.Linear(WIDTH, WIDTH), nn.ReLU())]
    return nn.Sequential(*stack, nn.Linear(WIDTH, 1))


class Stack(nn.Module):
    """The layers, in a model class of our own, as most models are."""

    def __init__(self):
        super().__init__()
        self.layers = make_layers()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def compiled_backward_nodes(output: torch.Tensor) -> list:
    """The autograd nodes of the compiled graphs' backward passes, found by walking
    the autograd graph back from `output`."""
    found, seen, todo = [], set(), [output.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if "CompiledFunction" in node.name():
            found.append(node)
        todo.extend(next_node for next_node, _ in node.next_functions)
    return found


def train(way: str, backend: str, device: torch.device) -> dict:
    """Train STEPS steps the way `way`; return what the last step showed."""
    graphs = []

    def counting_backend(graph_module, example_inputs):
        graphs.append(graph_module)
        return torch._dynamo.lookup_backend(backend)(graph_module, example_inputs)

    torch._dynamo.reset()  # forget the graphs of the previous way
    torch._dynamo.config.optimize_ddp = "optimize_ddp=False" not in way
    device_ids = [device.index] if device.type == "cuda" else None
    module = (make_layers() if way.endswith("Sequential") else Stack()).to(device)
    if way.startswith("compile_then_wrap"):
        module.compile(backend=counting_backend)  # in place: same module, same names
    model = ddp = DDP(module, device_ids=device_ids, bucket_cap_mb=BUCKET_MB)
    if way.startswith("wrap_then_compile"):
        model = torch.compile(ddp, backend=counting_backend)

    # The events of a backward pass, in order, timed as lesson 01's timeline draws them.
    events = []

    def note(kind: str) -> None:  # hooks that return None change nothing
        events.append({"kind": kind, "time": time.perf_counter()})

    for parameter in ddp.module.parameters():
        parameter.register_post_accumulate_grad_hook(lambda _: note("grad_ready"))

    def recording_allreduce(state, bucket):
        launch = {"kind": "bucket_launch", "time": time.perf_counter()}
        launch.update(index=bucket.index(), numel=bucket.buffer().numel())
        events.append(launch)

        def done(future):
            launch["done"] = time.perf_counter()  # gloo: the all-reduce has completed
            return future.value()

        return default_hooks.allreduce_hook(None, bucket).then(done)

    ddp.register_comm_hook(None, recording_allreduce)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs = torch.randn(16, WIDTH, device=device)
    for _ in range(STEPS):
        events.clear()
        optimizer.zero_grad()
        loss = F.mse_loss(model(inputs), torch.zeros(16, 1, device=device))
        for node in compiled_backward_nodes(loss):
            node.register_prehook(lambda *_: note("piece"))
        loss.backward()
        note("backward_end")
        optimizer.step()
    kinds = [event["kind"] for event in events]
    first = kinds.index("bucket_launch")
    return {
        "graphs": len(graphs),
        "all-reduces": kinds.count("bucket_launch"),
        "pieces": kinds.count("piece"),
        "pieces_after_first_allreduce": kinds[first:].count("piece"),
        "weights": flat_parameters(ddp.module),
        "keys": list(ddp.module.state_dict())[:2],
        "events": events,
    }


def main() -> None:
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument("--backend", default="aot_eager", help="torch.compile backend")
    parser.add_argument("--events", type=Path, help="write rank 0's last backward pass here")
    args = parser.parse_args()
    if args.backend not in ("aot_eager", "inductor"):
        parser.error(f"--backend {args.backend} is not one this lesson runs: aot_eager or inductor")
    local_rank, _, world_size = torchrun_env(launch_hint=LAUNCH)
    device = device_for(local_rank)
    dist.init_process_group(
        backend=dist.get_default_backend_for_device(device),
        device_id=device if device.type == "cuda" else None,  # nccl: this GPU, connect now
    )

    log0(
        f"torch {torch.__version__}, backend {args.backend}, "
        f"optimize_ddp by default: {torch._dynamo.config.optimize_ddp}"
    )
    results = {way: train(way, args.backend, device) for way in WAYS}
    for way, result in results.items():
        difference = (result["weights"] - results["eager"]["weights"]).abs().max().item()
        log0(
            f"{way:<38} | graphs compiled {result['graphs']} | all-reduces per step "
            f"{result['all-reduces']} | compiled backward pieces {result['pieces']}, "
            f"{result['pieces_after_first_allreduce']} after the first all-reduce "
            f"| max |w - w eager| {difference:.1e}"
        )
    keys = results["compile_then_wrap"]["keys"]
    log0(f"compile_then_wrap: after model.compile(), the state dict's keys: {keys}")
    if args.events and dist.get_rank() == 0:
        args.events.write_text(json.dumps({way: r["events"] for way, r in results.items()}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    end_process()  # not Python's teardown: see common.distributed.end_process
