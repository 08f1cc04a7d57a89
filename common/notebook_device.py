"""One device for a whole notebook: every launch it makes runs on the GPUs, or every
launch on the CPU, never some of each, so that no result, figure or check ever compares
a GPU run with a CPU run.

Introduced in 00_intro; the first code cell of every lesson notebook calls `choose`
with the most processes per machine that any of its launches starts:

    choose(processes_per_machine=4)        # 00_intro: hello_torchrun.py on 2, 3 and 4
    choose(cpu_because="two torchrun agents on one machine play two nodes ...")

With that many usable CUDA GPUs, every launch runs on them (nccl); with fewer, every
launch runs on the CPU (gloo), and the notebook says so in one line. A DDP_DEVICE you set
before starting Jupyter wins. The choice goes into this kernel's environment, which every
command the notebook starts inherits, and `common.launch` refuses a launch that starts
more processes per machine than the notebook declared: the CPU suite, which runs every
launch, proves each declaration.
"""

import os

# The most processes per machine this notebook said it starts; None before `choose`.
declared: int | None = None
# The DDP_DEVICE that `choose` set, so that running the first cell again decides again.
_chosen: str | None = None


def choose(processes_per_machine: int = 0, cpu_because: str = "") -> str:
    """Decide where every launch of this notebook runs, say it in one line, and set
    DDP_DEVICE for them; returns "cuda" or "cpu"."""
    from common.distributed import cuda_gpus  # imports torch: only here

    global declared, _chosen
    declared = processes_per_machine or None
    gpus = cuda_gpus()
    already = os.environ.get("DDP_DEVICE", "").strip().lower()
    if already and already != _chosen:
        device, line = already, f"DDP_DEVICE={already} was set: every launch runs there"
    elif cpu_because:
        device = "cpu"
        line = f"Every launch of this notebook runs on the CPU (gloo): {cpu_because}"
    elif where(gpus, processes_per_machine) == "cuda":
        device = "cuda"
        line = (
            f"{gpus} GPU(s) here, and this notebook starts at most {processes_per_machine} "
            "processes per machine: every launch runs on the GPUs (nccl)"
        )
    else:
        device = "cpu"
        line = f"Every launch of this notebook runs on the CPU (gloo): {gpus} GPU(s) here"
        if gpus:
            line += (
                f", and it starts up to {processes_per_machine} processes per machine, each "
                f"needing a GPU of its own. A machine with {processes_per_machine} GPUs runs "
                "it on GPUs; or launch its scripts yourself with at most "
                f"--nproc_per_node={gpus}"
            )
    os.environ["DDP_DEVICE"] = _chosen = device
    print(line)
    # Every notebook's first cell calls this: its figures get their titles as alt text.
    from common.figure_text import describe_figures_in_notebooks

    describe_figures_in_notebooks()
    return device


def where(gpus: int, processes_per_machine: int = 0, cpu_because: str = "") -> str:
    """The device a notebook with this declaration runs on, on a machine of `gpus` GPUs."""
    enough = gpus and gpus >= processes_per_machine
    return "cuda" if enough and not cpu_because else "cpu"


def check_launch(processes: int | None, command: str) -> None:
    """Refuse a launch that starts more processes per machine than the notebook declared
    (its GPUs, counted for that number, would not go round)."""
    if declared and processes and processes > declared:
        raise ValueError(
            f"`{command}` starts {processes} processes per machine, but this notebook "
            f"declared at most {declared} (choose(processes_per_machine=...) in its first "
            "code cell): raise that number"
        )
