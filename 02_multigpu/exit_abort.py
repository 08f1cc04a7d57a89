"""Lesson 02: why a finished DDP run can abort at exit, made likely, and the fix.

Launched as DDP scripts are, a run can train, save, print its last line and then die
of SIGABRT with `terminate called without an active exception`, now and then (rarely:
lesson 02 gives the counts measured). This script sets up the same three ingredients so that
it happens in most launches (lesson 02 and `common.distributed.end_process` explain
them; which thread wins the GIL first still varies, so not in every launch):

1. a collective started *inside* `backward()`, as DDP's reducer starts its bucket
   all-reduces: gloo's work object then holds a Python object, which gloo's worker
   thread must release, with the GIL, once the collective is done;
2. the main thread keeping the GIL while that happens (in real runs: by chance);
3. the GIL released again only after Python has begun tearing the interpreter down
   (in real runs: the flush of buffered output, a finalizer). The waiting thread is
   then ended by CPython (before 3.14), inside a C++ destructor: std::terminate.

`--end_process` ends the script the way every lesson script ends, and it never aborts.

Launch it (from any folder, with the path to this file):

    torchrun --standalone --nproc_per_node=2 exit_abort.py                # usually aborts
    torchrun --standalone --nproc_per_node=2 exit_abort.py --end_process  # always exits 0
"""

import sys
import time

import torch
import torch.distributed as dist

from common.cli import LessonArgumentParser
from common.distributed import end_process, log, torchrun_env

LAUNCH = "torchrun --standalone --nproc_per_node=2 exit_abort.py [--end_process]"


class ReleasesTheGilDuringTeardown:
    """Finalized while Python tears the interpreter down; its blocking call frees the
    GIL, as the flush of buffered output does at that moment in a real run."""

    def __del__(self):
        time.sleep(0.01)


def all_reduce_inside_backward(grad: torch.Tensor) -> None:
    # What DDP's reducer does for each bucket: a collective started during backward(),
    # so that gloo's work object keeps a copy of backward()'s thread state.
    dist.all_reduce(torch.ones(4), async_op=True)


def main() -> None:
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument(
        "--end_process", action="store_true", help="end through common's end_process()"
    )
    args = parser.parse_args()
    torchrun_env(launch_hint=LAUNCH)
    dist.init_process_group(backend="gloo")

    x = torch.ones(4, requires_grad=True)
    x.register_hook(all_reduce_inside_backward)
    log("backward, with an all-reduce inside")
    x.sum().backward()
    # Keep the GIL for half a second of pure Python (CPython would otherwise hand it to a
    # waiting thread every 5 ms): gloo's thread finishes the all-reduce meanwhile, and
    # waits for the GIL to drop the work object.
    sys.setswitchinterval(1000)
    deadline = time.perf_counter() + 0.5
    while time.perf_counter() < deadline:
        pass
    if args.end_process:
        end_process()  # no teardown: the waiting thread is never woken into it
    # Without end_process: the teardown begins, the witness's finalizer frees the GIL,
    # the waiting thread takes it, CPython ends that thread inside a C++ destructor.


witness = ReleasesTheGilDuringTeardown()

if __name__ == "__main__":
    main()
