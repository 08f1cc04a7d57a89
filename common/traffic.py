"""Counting what goes over the wire: the bytes handed to `torch.distributed.all_reduce`.

Introduced in 02_multigpu's DDP options part (`ddp_options/comm_hooks.py`); also used
by that lesson's `fp16_hook` exercise check, and by `uneven_inputs.py` (part 2) to count
the small all-reduces that `Join` adds.

DDP's communication hooks (PyTorch's own in `torch.distributed.algorithms.
ddp_comm_hooks`, and hooks written by hand) send their tensors with
`torch.distributed.all_reduce`, looked up on the module at every call. Swapping that
function for one that counts, then back, measures exactly what a hook sends, in any
hook, without changing it. (DDP without a hook all-reduces from C++, unseen here:
register `default_hooks.allreduce_hook`, the same operation, to count it.)
"""

import contextlib

import torch.distributed as dist


@contextlib.contextmanager
def counting_all_reduce(counter: dict):
    """Inside the block, add to `counter["bytes"]` the size of every tensor handed to
    torch.distributed.all_reduce, to `counter["elements"]` its number of elements, to
    `counter["calls"]` one, and to `counter["dtypes"]` its dtype."""
    counter.setdefault("bytes", 0)
    counter.setdefault("elements", 0)
    counter.setdefault("calls", 0)
    counter.setdefault("dtypes", set())
    original = dist.all_reduce

    def counted(tensor, *args, **kwargs):
        counter["bytes"] += tensor.numel() * tensor.element_size()
        counter["elements"] += tensor.numel()
        counter["calls"] += 1
        counter["dtypes"].add(tensor.dtype)
        return original(tensor, *args, **kwargs)

    dist.all_reduce = counted
    try:
        yield counter
    finally:
        dist.all_reduce = original
