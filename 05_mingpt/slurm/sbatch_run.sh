#!/bin/bash
# Lesson 05 on a Slurm cluster: the same main.py, one torchrun per node, the nodes
# meeting at a c10d rendezvous on the job's first node.
#
#   sbatch slurm/sbatch_run.sh                        # from 05_mingpt/ (or the repo root)
#   sbatch --nodes=4 slurm/sbatch_run.sh trainer.max_epochs=10 model.n_layer=8
#   NPROC_PER_NODE=8 sbatch slurm/sbatch_run.sh       # processes per node (default:
#                                                     # the node's GPUs, else 2)
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
# the folder you submit from: it must be on a filesystem that every node sees, since
# global rank 0 alone writes the snapshot and every rank reads it on a restart (lesson
# 04's multinode.py saves a copy on every node instead, and needs no shared folder).
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

python=${PYTHON:-python3}
# GPUs asked for (a count, or type:count): every worker must then find them. Stop in
# one line if PyTorch sees none, and say where training runs before anything starts.
gpus_per_node=${SLURM_GPUS_PER_NODE:-0}
gpus_per_node=${gpus_per_node##*:}
if ((gpus_per_node > 0)); then
    if ! "$python" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
        echo "sbatch_run.sh: the job asked for $gpus_per_node GPU(s) per node, but PyTorch sees none on $(hostname); on a CPU-only cluster submit with: sbatch --gpus-per-node=0 slurm/sbatch_run.sh $*" >&2
        exit 2
    fi
    export DDP_DEVICE=cuda # on every node: a worker without a GPU stops in one line
    where="$gpus_per_node GPU(s) per node, nccl"
else
    where="CPUs, gloo"
fi
nproc_per_node=${NPROC_PER_NODE:-${SLURM_GPUS_ON_NODE:-2}}
max_restarts=${MAX_RESTARTS:-1}
# The head node is the first of the job's nodes (node[1-2] -> node1). The rendezvous
# uses the address Slurm itself reaches it at, not its name: a node's name need not
# resolve on the other nodes (nor on this machine's local test cluster).
head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
head_node_addr=$(scontrol show node "$head_node" | grep -o 'NodeAddr=[^ ]*' | cut -d= -f2)
# This script runs on the first node of the allocation, the head node: unless told a
# port (RDZV_PORT), ask its kernel for one that is free there now, instead of a fixed
# number that another job on the same node may hold. (torchrun's rendezvous binds it a
# moment later: a port from the kernel's ephemeral range may be taken meanwhile by a
# connection on that node, which is why the course's tests pass one they reserved.)
port=${RDZV_PORT:-$("$python" -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')}

# When a worker dies, its node's torchrun restarts the group (--max-restarts) and the
# other nodes' torchruns follow. By default the workers of every attempt share one
# key-value store, old keys included, so a new worker can read a dead worker's address:
# it then meets its peer, is refused, or waits with it until the timeout, by chance
# (lesson 03 shows all three). A fresh store for every rendezvous round avoids it.
# (srun passes this to the torchrun of every node.)
export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1

echo "job $SLURM_JOB_ID: $SLURM_NNODES node(s) x $nproc_per_node process(es) ($where), rendezvous at $head_node ($head_node_addr):$port"
srun --ntasks-per-node=1 "${TORCHRUN:-torchrun}" \
    --nnodes="$SLURM_NNODES" \
    --nproc_per_node="$nproc_per_node" \
    --max-restarts="$max_restarts" \
    --rdzv_id="$SLURM_JOB_ID" \
    --rdzv_backend=c10d \
    --rdzv_endpoint="$head_node_addr:$port" \
    "$main" "$@"
