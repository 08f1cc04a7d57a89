#!/bin/bash
# Lesson 05 on a Slurm cluster: the same main.py, one torchrun per node, the nodes
# meeting at a c10d rendezvous on the job's first node.
#
#   sbatch slurm/sbatch_run.sh                        # from 05_mingpt/ (or the repo root)
#   sbatch --nodes=4 slurm/sbatch_run.sh trainer.max_epochs=10 model.n_layer=8
#   NPROC_PER_NODE=8 sbatch slurm/sbatch_run.sh       # processes per node (default:
#                                                     # the GPUs PyTorch sees, else 2)
#   PYTHON=~/venv/bin/python sbatch slurm/sbatch_run.sh  # the Python that has PyTorch
#                                                     # (default: python3 on PATH)
#   sbatch --gpus-per-node=0 slurm/sbatch_run.sh      # a CPU-only cluster (or delete
#                                                     # the --gpus-per-node line)
#   RDZV_PORT=29500 sbatch slurm/sbatch_run.sh        # the rendezvous port (default:
#                                                     # one free on the head node now)
#
# It asks for 4 GPUs per node (one process each) and 2 CPU cores per node: give the
# workers more cores on a real cluster, for data loading (--cpus-per-task), and add
# your account and partition.
#
# The global batch (trainer.global_batch_size, 64 sequences by default) is the same
# whatever the number of processes: on 2 nodes x 4 GPUs each takes 8 sequences a step.
# GPUs have room for far more: raise it, and the learning rate with it.
#
# At the time limit (--time), Slurm sends SIGTERM to every process of the job step:
# the workers agree on a step, save its snapshot and exit with 75 (main.py's docstring);
# submit the job again from the same folder to resume there. Slurm's KillWait (30 s by
# default) must cover one step and a save.
#
# Arguments after the script name go to main.py. Snapshots and metrics are written to
# the folder you submit from, by global rank 0 alone; on a restart every rank resumes
# from the newest snapshot that any rank sees, sent by the rank that sees it (lesson
# 04's rule). Put the folder on a filesystem every node sees: global rank 0 may land on
# another node in the next job.
#
#SBATCH --job-name=mingpt-ddp
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=2
#SBATCH --time=00:30:00
#SBATCH --output=%x-%j.out

set -euo pipefail

# Slurm runs a copy of this file from its spool folder, so find main.py from the
# folder the job was submitted from, not from this file's path. (The official
# series' script names /shared/examples/mingpt/main.py, a path of its AWS set-up.)
# An absolute path: every node's torchrun starts it, whatever folder srun gives it.
cd "${SLURM_SUBMIT_DIR:-.}"
if [[ -f main.py && -f model.py ]]; then
    main=$PWD/main.py
elif [[ -f 05_mingpt/main.py ]]; then
    main=$PWD/05_mingpt/main.py
else
    echo "sbatch_run.sh: no main.py in $(pwd) or $(pwd)/05_mingpt; submit the job from the lesson folder or the repository root" >&2
    exit 2
fi

# One Python for everything, exported to every node: the one that counts the GPUs here
# is the one whose torchrun starts the workers (below), not whichever is first on PATH.
export PYTHON=${PYTHON:-python3}
# Where training runs, decided as the workers decide it (CUDA GPUs when PyTorch sees
# any, else the CPU) and said before anything starts. SLURM_GPUS_ON_NODE is the number
# of GPUs Slurm gave the job here, however they were asked for (--gpus-per-node,
# --gres=gpu:N, --gpus): when PyTorch sees none of them, stop in one line.
if ! gpus_seen=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())'); then
    echo "sbatch_run.sh: $PYTHON cannot import torch on $(hostname); set PYTHON to the Python that has PyTorch" >&2
    exit 2
fi
gpus_given=${SLURM_GPUS_ON_NODE:-0}
if ((gpus_given > 0 && gpus_seen == 0)); then
    echo "sbatch_run.sh: Slurm gave the job $gpus_given GPU(s) on $(hostname), but PyTorch sees none; on a CPU-only cluster submit with: sbatch --gpus-per-node=0 slurm/sbatch_run.sh $*" >&2
    exit 2
fi
if ((gpus_seen > 0)); then
    export DDP_DEVICE=cuda # on every node: a worker without a GPU stops in one line
    where="GPUs, nccl"
    nproc_per_node=${NPROC_PER_NODE:-$gpus_seen} # one process per GPU
else
    where="CPUs, gloo"
    nproc_per_node=${NPROC_PER_NODE:-2}
fi
max_restarts=${MAX_RESTARTS:-1}
# The head node is the first of the job's nodes (node[1-2] -> node1). The rendezvous
# uses the address Slurm itself reaches it at, not its name: a node's name need not
# resolve on the other nodes (nor on this machine's local test cluster). (sed reads the
# whole list: `head -n 1` would stop reading, and scontrol, cut off while writing a long
# list, would end the job under `set -o pipefail`.)
head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)
head_node_addr=$(scontrol show node "$head_node" | grep -o 'NodeAddr=[^ ]*' | cut -d= -f2)
# This script runs on the first node of the allocation, the head node: unless told a
# port (RDZV_PORT), ask its kernel for one that is free there now, instead of a fixed
# number that another job on the same node may hold. (torchrun's rendezvous binds it a
# moment later: a port from the kernel's ephemeral range may be taken meanwhile by a
# connection on that node, which is why the course's tests pass one they reserved.)
port=${RDZV_PORT:-$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')}

# When a worker dies, its node's torchrun restarts the group (--max-restarts) and the
# other nodes' torchruns follow. By default the workers of every attempt share one
# key-value store, old keys included, so a new worker can read a dead worker's address:
# it then meets its peer, is refused, or waits with it until the timeout, by chance
# (lesson 03 shows all three). A fresh store for every rendezvous round avoids it.
# (srun passes this to the torchrun of every node.)
export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1

# srun does not inherit sbatch's --cpus-per-task (since Slurm 22.05, sbatch's man page
# says): without this each node's task (the agent and all its workers) is given one
# CPU, and is confined to it where the cluster binds tasks to their CPUs.
export SRUN_CPUS_PER_TASK=${SLURM_CPUS_PER_TASK:-1}

echo "job $SLURM_JOB_ID: $SLURM_NNODES node(s) x $nproc_per_node process(es) ($where), rendezvous at $head_node ($head_node_addr):$port"
# One torchrun agent per node. Each gives, as its own address (--local-addr), the one
# Slurm reaches its node at, read on that node: the agent that c10d makes node 0 (by
# sorted address: not always the head node) hands its address to every worker as
# MASTER_ADDR, and without --local-addr that is its hostname's FQDN, which the other
# nodes need not resolve.
agent='exec "$PYTHON" -m torch.distributed.run --local-addr="$(scontrol show node "$SLURMD_NODENAME" | grep -o "NodeAddr=[^ ]*" | cut -d= -f2)" "$@"'
srun --ntasks-per-node=1 bash -c "$agent" agent \
    --nnodes="$SLURM_NNODES" \
    --nproc_per_node="$nproc_per_node" \
    --max-restarts="$max_restarts" \
    --rdzv_id="$SLURM_JOB_ID" \
    --rdzv_backend=c10d \
    --rdzv_endpoint="$head_node_addr:$port" \
    "$main" "$@"
