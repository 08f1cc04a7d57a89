"""Helpers every lesson script shares: which device to use, where this process sits in
the world, and printing that says which rank is talking. (The backend is PyTorch's own
choice for the device, `dist.get_default_backend_for_device`, called in each script.)

Introduced in 00_intro; used by every lesson script.

Device-agnostic by design: CUDA + nccl where there is a GPU, else CPU + gloo. Set
`DDP_DEVICE=cpu` (or `cuda`) to override the choice, for example to run the CPU
version of a lesson on a GPU machine.
"""

import atexit
import os
import socket
import sys
from datetime import timedelta
from pathlib import Path
from typing import NoReturn

import torch
import torch.distributed as dist

TORCHRUN_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def device_type() -> str:
    """'cuda' when a CUDA GPU is usable (or DDP_DEVICE says so), else 'cpu'.

    `torch.accelerator` names the machine's accelerator, if any is usable: cuda, or
    another kind (mps on a Mac, xpu...). The course runs on CUDA GPUs with nccl; with
    any other accelerator, or none, it trains on the CPU with gloo."""
    wanted = os.environ.get("DDP_DEVICE", "").strip().lower()
    if wanted not in ("", "cpu", "cuda"):
        sys.exit(f"DDP_DEVICE={wanted!r} is not a device: use DDP_DEVICE=cpu or DDP_DEVICE=cuda")
    on_cuda = cuda_gpus() > 0
    if wanted == "cuda" and not on_cuda:
        sys.exit("DDP_DEVICE=cuda but PyTorch sees no CUDA GPU: unset DDP_DEVICE to run on CPU")
    if wanted:
        return wanted
    return "cuda" if on_cuda else "cpu"


def cuda_gpus() -> int:
    """How many CUDA GPUs this process can use: 0 without a usable accelerator, or with
    another kind (`torch.accelerator` names it: mps on a Mac, xpu...)."""
    accelerator = torch.accelerator.current_accelerator(check_available=True)
    if accelerator is None or accelerator.type != "cuda":
        return 0
    return torch.accelerator.device_count()


def device_for(local_rank: int) -> torch.device:
    """The device this process trains on. Each process on a machine owns one GPU,
    chosen by its *local* rank; on CPU every process uses the CPU.

    On a GPU machine: `torch.cuda.set_device(local_rank)`, then
    `torch.device("cuda", local_rank)`, else `torch.device("cpu")`. Without `set_device`
    every process of a machine would put its CUDA context and nccl's buffers on GPU 0.
    Before that, it stops with one line where the GPUs cannot go round
    (`check_gpus_go_round`)."""
    if device_type() == "cuda":
        check_gpus_go_round(local_rank)
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def check_gpus_go_round(local_rank: int) -> None:
    """Stop with one line, on every process of the machine, where one GPU per process
    is impossible: more processes than GPUs ("invalid device ordinal" otherwise, on
    the processes left without one), or several torchrun agents on this machine
    playing several nodes, whose local ranks 0 would all take GPU 0 (nccl: "Duplicate
    GPU detected"). torchrun sets LOCAL_WORLD_SIZE and GROUP_WORLD_SIZE (its agents);
    under mp.spawn the local rank is all there is to go by.

    `torchrun --virtual-local-rank` gives every worker LOCAL_RANK=0 and a
    CUDA_VISIBLE_DEVICES that names its own GPU (torch/distributed/elastic/agent/server/
    local_elastic_agent.py, `_set_local_rank_env`), so each sees one GPU, as device 0:
    that fits. A worker cannot tell it from CUDA_VISIBLE_DEVICES=0 set by hand for two
    processes without it; there the local rank 1 process stops with the line, and
    torchrun then ends the other. Nor can it see two such agents on one machine that
    share a CUDA_VISIBLE_DEVICES or have none: torchrun gives local rank k the k-th GPU
    of its agent's list (GPU k without one), so each agent needs a list of its own."""
    gpus = cuda_gpus()
    # --virtual-local-rank's layout: this worker was handed exactly one GPU, as device 0
    own_gpu = local_rank == 0 and gpus == 1 and "CUDA_VISIBLE_DEVICES" in os.environ
    on_this_machine = int(os.environ.get("LOCAL_WORLD_SIZE", local_rank + 1))
    if on_this_machine > gpus and not own_gpu:
        sys.exit(
            f"{on_this_machine} processes on this machine but {gpus} GPU(s), and each "
            f"process needs a GPU of its own: start at most {gpus} "
            f"(--nproc_per_node={gpus}), or run on the CPU with DDP_DEVICE=cpu"
        )
    agents = int(os.environ.get("GROUP_WORLD_SIZE", 1))  # torchrun's agents (nodes) in the job
    if agents > 1 and world_on_this_machine() and "CUDA_VISIBLE_DEVICES" not in os.environ:
        sys.exit(
            f"{agents} torchrun agents on this machine play {agents} nodes, and each would "
            "put its local rank 0 on GPU 0: give each agent GPUs of its own "
            "(CUDA_VISIBLE_DEVICES=0 for one, =1 for the other...), or run on the CPU "
            "with DDP_DEVICE=cpu"
        )


def require_torchrun(launch_hint: str) -> None:
    """Stop with one line telling how to start the script when torchrun did not start
    it (it sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for every
    worker). `launch_hint` is the command to show, e.g.
    "torchrun --standalone --nproc_per_node=2 hello_ddp.py"."""
    missing = [name for name in TORCHRUN_VARIABLES if name not in os.environ]
    if missing:
        script = Path(sys.argv[0]).name
        sys.exit(
            f"{script} must be started by torchrun (it sets {', '.join(missing)}); "
            f"launch it as: {launch_hint}"
        )


def torchrun_env(launch_hint: str) -> tuple[int, int, int]:
    """(local_rank, global_rank, world_size) as torchrun sets them, after
    `require_torchrun(launch_hint)`. Stands for `int(os.environ["LOCAL_RANK"])`,
    `int(os.environ["RANK"])`, `int(os.environ["WORLD_SIZE"])`; and when this machine
    holds the whole world, `gloo_over_loopback()`."""
    require_torchrun(launch_hint)
    if world_on_this_machine():
        gloo_over_loopback()
    return int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def store_of_this_attempt(launch_hint: str) -> dist.Store:
    """The store where the workers of this attempt of a torchrun job meet: give it to
    `init_process_group(store=..., rank=..., world_size=...)`. It is the store that
    init_process_group would find by itself at MASTER_ADDR:MASTER_PORT
    (`dist.rendezvous("env://")`); when that is torchrun's shared store, with every key
    under a prefix of this attempt's own, `attempt<TORCHELASTIC_RESTART_COUNT>/`.

    Why: torchrun's agent lends its workers a store that it keeps for every restart
    (TORCHELASTIC_USE_AGENT_STORE=True in their environment, unless
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1). The keys the dead workers wrote are still in
    it, gloo's addresses among them, and a restarted worker can read a dead worker's
    address, dial it, and fail or hang (lesson 03, `stale_address.py`). Under a prefix
    per attempt every attempt's keys are new. One agent counts every restart of its
    workers; agents on several nodes each count only the restarts that their own
    workers' failures caused (lesson 04), so their workers could choose different
    prefixes and never meet. Such a job, if it may restart, needs a store of each
    attempt's own (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, the c10d rendezvous), and stops
    here in one line without it."""
    shared = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    agents = int(os.environ.get("GROUP_WORLD_SIZE", "1"))
    may_restart = int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0")) > 0
    if shared and agents > 1 and may_restart:
        sys.exit(
            f"{Path(sys.argv[0]).name}: restarts of a job of {agents} torchrun agents need "
            "a store of each attempt's own; launch it as: "
            f"TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 {launch_hint}"
        )
    store, _, _ = next(dist.rendezvous("env://"))
    if not shared:
        # A store of this attempt's own (worker rank 0 starts it): no old keys in it, and
        # agents that counted their restarts differently must not pick different prefixes.
        return store
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return dist.PrefixStore(f"attempt{attempt}", store)  # keys "attempt<N>/..."


def job_store(wait: float = 60.0) -> dist.TCPStore:
    """A client of the store that init_process_group uses (MASTER_ADDR:MASTER_PORT),
    whose waits give up after `wait` seconds: the second TCPStore of torchrun's rank-0
    agent, or with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 the one that worker rank 0 of
    this attempt starts (inside init_process_group: not there before it)."""
    address, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    return dist.TCPStore(address, port, is_master=False, timeout=timedelta(seconds=wait))


def start_together(rank: int, world_size: int, wait: float = 60.0) -> None:
    """Return once every rank of the job has called this (after `wait` seconds at most),
    through torchrun's shared store (job_store).
    For scripts whose process group has a timeout of seconds: init_process_group waits
    that long for the last process to arrive, and on a busy machine one starts seconds
    after another. Lined up first, the ranks meet in init_process_group within
    milliseconds, and the timeout measures the lesson's hang, not a late start."""
    store = job_store(wait)
    store.set(f"started_{rank}", "yes")
    store.wait([f"started_{other}" for other in range(world_size)])


def world_on_this_machine() -> bool:
    """True when every process of the job runs on this machine: one torchrun agent holds
    the whole world, or the store is at a loopback address, which only this machine's
    processes can reach (two agents on one machine playing two nodes)."""
    one_agent = os.environ.get("LOCAL_WORLD_SIZE") == os.environ.get("WORLD_SIZE")
    return one_agent or os.environ.get("MASTER_ADDR") in ("127.0.0.1", "localhost")


def loopback_interface() -> str | None:
    """The network interface that carries 127.0.0.1: `lo` on Linux, `lo0` on macOS."""
    names = {name for _, name in socket.if_nameindex()}
    return next((name for name in ("lo", "lo0") if name in names), None)


def gloo_over_loopback() -> None:
    """Have gloo connect this machine's processes over 127.0.0.1. For worlds that live
    on one machine only; call it before `init_process_group`.

    Why: unless GLOO_SOCKET_IFNAME names an interface, each gloo process listens on the
    address the machine's *hostname* resolves to, and tells the others to connect
    there. Within one machine that lookup is needless and can go wrong: a Mac's
    `name.local` is looked up over the network (slow, or not at all when offline), a
    VPN or a firewall can change or block the answer. Loopback needs no name. Lesson 04
    shows what the hostname does across machines. A GLOO_SOCKET_IFNAME you set wins."""
    interface = loopback_interface()
    if interface and "GLOO_SOCKET_IFNAME" not in os.environ:
        os.environ["GLOO_SOCKET_IFNAME"] = interface


def spawned_on_one_machine(world_size: int) -> None:
    """What a process that `mp.spawn` started (lesson 02) needs before it joins the
    group, where torchrun would have set it up: gloo over loopback (`gloo_over_loopback`),
    and on the CPU its share of the cores. torchrun gives every worker OMP_NUM_THREADS=1;
    mp.spawn lets every process use every core, and N processes each running N threads
    would fight over them."""
    gloo_over_loopback()
    if device_type() == "cpu":
        torch.set_num_threads(max(1, torch.get_num_threads() // world_size))


def current_rank() -> int:
    """The global rank: from the process group once there is one, else from torchrun's
    environment, else 0 (a single process)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", 0))


def log(message: str) -> None:
    """Print one line prefixed with this process's rank, e.g. `[rank1] epoch 3 ...`.

    The line and its newline go out in one write and are flushed at once, so lines
    from several processes sharing a terminal never interleave mid-line.
    """
    sys.stdout.write(f"[rank{current_rank()}] {message}\n")
    sys.stdout.flush()


def log0(message: str) -> None:
    """Print on rank 0 only: for facts that are the same on every rank (a loss already
    averaged over ranks, the config), which would otherwise be printed N times."""
    if current_rank() == 0:
        log(message)


def end_process(exit_code: int = 0) -> NoReturn:
    """End this process now, without Python's interpreter teardown. Every lesson script
    that joins a process group ends through it, after `dist.destroy_process_group()`.

    Why (lesson 02 shows it; `02_multigpu/exit_abort.py` reproduces it): during every
    `backward()` PyTorch keeps a Python object (a `contextvars.Context`) in the calling
    thread's state, and each collective that DDP starts inside `backward()` keeps a copy
    of that state. gloo's worker thread drops the collective's work object, and with it
    the Python object, a moment after the collective has finished; dropping it needs
    the GIL. If the main thread has by then begun tearing the interpreter down, CPython
    (before 3.14) ends the waiting thread with `pthread_exit`, which cannot unwind
    through PyTorch's destructor: `terminate called without an active exception`,
    SIGABRT, and a finished run reported as failed: rarely (the counts are lesson 02's).
    PyTorch gives no way to wait for that thread: once a model has been wrapped in DDP,
    gloo's threads outlive `destroy_process_group()` and the model itself. So the sure
    fix is not to start the teardown: flush the output, run the exit handlers (torch's,
    logging's, multiprocessing's) while the interpreter is whole, then `os._exit`.

    COURSE_TEARDOWN=python ends through Python's teardown instead, as every script did
    before this function: `tests/stress_launches.py --python_teardown` counts what that
    costs, with the same scripts.
    """
    if os.environ.get("COURSE_TEARDOWN") == "python":
        sys.exit(exit_code)
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()  # what a normal exit runs first, while everything still works
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)
