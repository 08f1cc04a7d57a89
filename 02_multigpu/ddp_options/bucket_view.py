"""Lesson 02, DDP's options: `gradient_as_bucket_view=True`, and the memory it saves.

DDP all-reduces gradients in buckets: flat tensors as big as all the gradients
together. It creates them when it wraps the model (empty: on the CPU their memory
becomes resident only when the first backward pass writes into them), and creates
them again at the start of the second forward pass, in the order the gradients
arrived (the rebuild), freeing the first ones. By default each parameter's `.grad` is
a tensor of its own, and DDP copies it into its bucket before the all-reduce and the
averaged result back: the gradients are held twice. With
`gradient_as_bucket_view=True`, each `.grad` is a view into its bucket: held once.

For models of a few sizes, with the option off and on, the run prints the memory that
buckets and gradients take together after two training steps (on the CPU, the growth
of the process's resident memory; on a GPU, the allocator's count), and whether each
`.grad` shares its storage with a bucket (a communication hook sees the buckets). Then
what the option asks of the training loop: a view cannot be detached in place, so
`grad.detach_()` fails; and `optimizer.zero_grad()`'s default, `set_to_none=True`,
drops the views, so that each backward pass allocates new gradients that DDP copies
into the buckets again: with the option, call `zero_grad(set_to_none=False)`.

The layers are 64 MB each, so that every tensor is allocated and freed on its own and
the resident memory of the process follows them.

Launch it (from any folder, with the path to this file):

    torchrun --standalone --nproc_per_node=2 bucket_view.py
    torchrun --standalone --nproc_per_node=2 bucket_view.py --layers 1 2 4
"""

import gc

import psutil
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from common.cli import LessonArgumentParser, positive_int
from common.distributed import device_for, end_process, log0, torchrun_env

LAUNCH = "torchrun --standalone --nproc_per_node=2 bucket_view.py [--layers 1 2 4]"
WIDTH = 4096  # a 4096 x 4096 float32 layer: 64 MB
MB = 2**20


def memory_in_use(device: torch.device) -> int:
    """Bytes in use: the allocator's count on a GPU, the process's resident memory on
    the CPU (where PyTorch keeps no count of its own)."""
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device)
    gc.collect()
    return psutil.Process().memory_info().rss


def recording_allreduce(bucket_storages: set, bucket: dist.GradBucket):
    """DDP's own all-reduce, noting where each bucket's memory lives."""
    bucket_storages.add(bucket.buffer().untyped_storage().data_ptr())
    return default_hooks.allreduce_hook(None, bucket)


def measure(layers: int, as_view: bool, device: torch.device) -> dict:
    """Memory (MB) of the parameters of a model of `layers` 64 MB layers, and of what DDP
    adds to them (buckets and gradients) after two training steps."""
    start = memory_in_use(device)
    torch.manual_seed(0)
    plain = nn.Sequential(*(nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(layers)))
    plain = plain.to(device)
    with_parameters = memory_in_use(device)
    model = DDP(
        plain,
        device_ids=[device.index] if device.type == "cuda" else None,
        gradient_as_bucket_view=as_view,
    )
    bucket_storages = set()
    model.register_comm_hook(bucket_storages, recording_allreduce)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)
    inputs = torch.randn(4, WIDTH, device=device)
    for _ in range(2):  # the first step rebuilds the buckets; measure after the second
        optimizer.zero_grad(set_to_none=not as_view)  # keep the views, where they are
        model(inputs).sum().backward()
        optimizer.step()
    with_gradients = memory_in_use(device)
    grads_in_buckets = all(
        p.grad.untyped_storage().data_ptr() in bucket_storages for p in model.parameters()
    )
    result = {
        "parameters": (with_parameters - start) / MB,
        "buckets_and_gradients": (with_gradients - with_parameters) / MB,
        "grads_in_buckets": grads_in_buckets,
    }
    if as_view:
        try:
            next(model.parameters()).grad.detach_()
            result["detach_"] = "allowed"
        except RuntimeError as error:
            result["detach_"] = str(error)
        optimizer.zero_grad(set_to_none=False)
        result["kept"] = all(
            p.grad.untyped_storage().data_ptr() in bucket_storages for p in model.parameters()
        )
        optimizer.zero_grad()  # set_to_none=True, the default
        result["dropped"] = all(p.grad is None for p in model.parameters())
    del model, plain, optimizer
    return result


def main() -> None:
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument(
        "--layers", type=positive_int, nargs="+", default=[1, 4], help="model sizes, in layers"
    )
    args = parser.parse_args()
    local_rank, _, _ = torchrun_env(launch_hint=LAUNCH)
    device = device_for(local_rank)
    dist.init_process_group(
        backend=dist.get_default_backend_for_device(device),
        device_id=device if device.type == "cuda" else None,  # nccl: this GPU, connect now
    )

    measure(1, False, device)  # not shown: it includes the first DDP model's one-time costs
    for layers in args.layers:
        for as_view in (False, True):
            used = measure(layers, as_view, device)
            log0(
                f"{layers * WIDTH * WIDTH * 4 / MB:.0f} MB of parameters | "
                f"gradient_as_bucket_view={as_view!s:<5} | MB in use: "
                f"parameters {used['parameters']:6.1f}, "
                f"buckets and gradients {used['buckets_and_gradients']:6.1f} "
                f"| every .grad in a bucket: "
                f"{used['grads_in_buckets']}"
            )
            if "detach_" in used and layers == args.layers[0]:
                log0(f"gradient_as_bucket_view=True: grad.detach_() -> {used['detach_']}")
                log0(
                    "gradient_as_bucket_view=True: after zero_grad(set_to_none=False) every "
                    f".grad is still in a bucket: {used['kept']} | after zero_grad() "
                    f"(set_to_none=True) every .grad is None: {used['dropped']}"
                )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    end_process()  # not Python's teardown: see common.distributed.end_process
