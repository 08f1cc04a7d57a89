"""Every lesson script, once each at its smallest settings: what the GPU mode
(`course.gpu_mode`) runs on the GPUs, and what `tests/stress_launches.py` launches many
times. The CPU suite launches each of them too, with the assertions of its lesson.

A launch names how it starts its processes: `torchrun` (one per GPU), `spawn` (the
script starts them itself with mp.spawn and takes `--world_size N`) or `python` (one
process, no process group), and the fewest processes it accepts.
"""

import shlex
import sys
import tempfile
from dataclasses import dataclass

from common.launch import CommandFailed, CommandTimedOut, start


@dataclass(frozen=True)
class Launch:
    name: str
    script: str  # from the repository's root
    arguments: tuple[str, ...] = ()
    launcher: str = "torchrun"  # or "spawn", "python"
    fewest: int = 1  # processes: a script that needs 2 refuses 1 in one line

    def command(self, processes: int, folder_of_scripts) -> list[str]:
        """The command line that starts it with `processes` processes (torchrun's and
        mp.spawn's), from this Python's environment."""
        script = str(folder_of_scripts / self.script)
        if self.launcher == "python":
            return [sys.executable, script, *self.arguments]
        if self.launcher == "spawn":
            return [sys.executable, script, *self.arguments, "--world_size", str(processes)]
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        return [*torchrun, f"--nproc_per_node={processes}", script, *self.arguments]


def run_once(command: list[str], time_limit: float, **environment: str) -> tuple[str, str]:
    """(how it ended: "exit N" or "killed after T s", its output) of one command in a
    fresh temporary folder, with one thread per process as torchrun's workers have.

    It runs through `common.launch`, as every notebook's launch does: torchrun gets the
    address 127.0.0.1 and an error-file folder of its own (removed when it ends), and a
    launch past its time limit is killed with every process it started, torchrun's
    workers too, though each lives in a session of its own."""
    with tempfile.TemporaryDirectory(prefix="launch-") as folder:
        threads = {"OMP_NUM_THREADS": "1", **environment}
        launched = start(shlex.join(command), cwd=folder, env=threads, quiet=True)
        try:
            launched.wait(time_limit)
        except CommandTimedOut:
            return f"killed after {time_limit:g} s", launched.output
        except CommandFailed:
            pass  # a non-zero exit is this function's answer, not an error
        return f"exit {launched.returncode}", launched.output


LAUNCHES = [
    Launch("hello_torchrun", "00_intro/hello_torchrun.py"),
    Launch("ring_allreduce", "01_theory/ring_allreduce.py", ("--max-size=16KB", "--repeats=1")),
    Launch("collectives_tour", "01_theory/collectives_tour.py", fewest=2),
    Launch("ddp_replicas", "01_theory/ddp_replicas.py", ("--epochs", "1")),
    Launch("ddp_buckets", "01_theory/ddp_buckets.py", ("--caps", "1", "--iterations", "2")),
    Launch("sampler_indices", "01_theory/sampler_indices.py"),
    Launch("ddp_profile", "01_theory/ddp_profile.py", ("--out", "traces", "--steps", "1")),
    Launch("ddp_step_times", "01_theory/ddp_step_times.py", ("--caps", "1", "--steps", "1")),
    Launch("single_gpu", "02_multigpu/single_gpu.py", ("1", "1"), launcher="python"),
    Launch("multigpu", "02_multigpu/multigpu.py", ("1", "1"), launcher="spawn"),
    Launch("scaling", "02_multigpu/scaling.py", ("--epochs", "2", "--samples", "512")),
    Launch("checkpoint_barrier", "02_multigpu/checkpoint_barrier.py"),
    Launch("grad_accumulation", "02_multigpu/grad_accumulation.py", ("--steps", "2")),
    Launch("model_parallel", "02_multigpu/model_parallel.py", ("--steps", "2")),
    Launch("sync_batchnorm", "02_multigpu/sync_batchnorm.py", ("--steps", "2")),
    Launch("uneven_inputs", "02_multigpu/uneven_inputs.py", ("--join", "--batches", "1")),
    Launch("exit_abort", "02_multigpu/exit_abort.py", ("--end_process",)),
    Launch("slow_rank", "02_multigpu/slow_rank.py", ("--delays", "1", "--timeout", "10"), fewest=2),
    Launch("bucket_view", "02_multigpu/ddp_options/bucket_view.py"),
    Launch("comm_hooks", "02_multigpu/ddp_options/comm_hooks.py", ("--size-mb=4", "--steps=5")),
    Launch("ddp_checkpoints", "02_multigpu/ddp_options/ddp_checkpoints.py", ("--folder", ".")),
    Launch("ddp_compile", "02_multigpu/ddp_options/ddp_compile.py"),
    Launch("static_graph", "02_multigpu/ddp_options/static_graph.py"),
    Launch("sync_buffers", "02_multigpu/ddp_options/sync_buffers.py", ("--steps", "2")),
    Launch("unused_parameters", "02_multigpu/ddp_options/unused_parameters.py", ("--layers", "8")),
    Launch("multigpu_torchrun", "03_fault_tolerance/multigpu_torchrun.py", ("1", "1")),
    Launch("multigpu_preemptible", "03_fault_tolerance/multigpu_preemptible.py", ("1", "1")),
    Launch("multinode", "04_multinode/multinode.py", ("1", "1")),
    Launch("node_report", "04_multinode/node_report.py"),
    Launch(
        "mingpt_main",
        "05_mingpt/main.py",
        (
            "trainer.max_steps=4",
            "optimizer.warmup_steps=1",
            "trainer.sample_chars=0",
            "model.n_layer=1",
            "trainer.eval_every=2",
        ),
    ),
    Launch("fsdp_shards", "05_mingpt/fsdp_shards.py", ("--n-layer", "1", "--steps", "2")),
]
