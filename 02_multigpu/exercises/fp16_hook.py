"""Exercise 02 · fp16_hook: a communication hook that sends the gradients as 16-bit floats.

A DDP communication hook gets each bucket of gradients once it is ready and returns a
`torch.futures.Future` whose value is the bucket averaged over the ranks: a tensor of
the same shape and dtype as `bucket.buffer()` (the lesson's `ddp_options/comm_hooks.py`
shows the contract in `average_hook`). Sending the bucket as float16 halves the bytes
on the wire, at the price of float16's precision (about 3 significant digits).

Task: write `fp16_average_hook`: convert the bucket to float16, divide it by the world
size (before the sum, which keeps the sum within float16's range), all-reduce it with
`torch.distributed.all_reduce(..., async_op=True)` on the process group given (the
default group when it is None), and return a Future that, once the sum has arrived,
copies it back into the float32 bucket and gives that bucket.

The check starts a 2-process gloo world on this machine; in each process it wraps a
small network in DDP, registers your hook, trains 3 steps on this rank's part of each
batch, and checks that everything your hook sent was float16, half the bytes of the
gradients, that its Future gave DDP the float32 bucket, and that the weights are those
of one process trained on the whole batches, to float16's precision.
Hint: `dist.all_reduce(...).get_future().then(callback)`.
"""

import torch
import torch.distributed as dist


def fp16_average_hook(
    process_group: dist.ProcessGroup | None, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """Average `bucket` over the ranks of `process_group`, sent as float16."""
    buffer = bucket.buffer()  # this bucket's gradients, float32, flattened into one tensor
    # TODO: compress, divide, all-reduce asynchronously, and return the Future of the
    # float32 bucket holding the average.
    raise NotImplementedError(f"fp16_average_hook: a bucket of {buffer.numel()} {buffer.dtype}")
