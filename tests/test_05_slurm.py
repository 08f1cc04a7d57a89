"""Lesson 05 under Slurm: `slurm/sbatch_run.sh`, unchanged, trains main.py on lesson 04's
two-node Slurm cluster on this machine (root and Debian's Slurm packages, else it skips),
and survives a worker killed from outside. (Its processes per node by default, and its
refusal of a wrong submit folder: tests/test_04_slurm_gpus.py.)"""

import math
import re
import shutil
import signal

import torch
from conftest import REPO, lesson_05_text, lesson_module, metrics

from common.ports import free_port
from common.processes import workers_of_rank
from course.cluster import slurm

LESSON = REPO / "05_mingpt"
SBATCH = LESSON / "slurm" / "sbatch_run.sh"

char_dataset = lesson_module("05_mingpt", "char_dataset")

# A tiny model on a short text (2 processes x 2 micro-batches x 8): seconds a job.
TINY = (
    "model.n_layer=2 model.n_head=2 model.n_embd=32 data.block_size=32 trainer.batch_size=8 "
    "trainer.global_batch_size=32 trainer.max_epochs=2 trainer.log_every=5 "
    "trainer.eval_every=1000 trainer.sample_chars=40 optimizer.warmup_steps=5"
)
# torchrun's agent logs (LOGLEVEL=INFO) what each rendezvous gave it, a field a line.
AGENT_FIELD = re.compile(r"^I\S+ \S+ (\d+) \S+api\.py:\d+\]\s+(\w+)=(.*)$", re.MULTILINE)


def rendezvous_results(output):
    """{agent pid: [{field: value} for each rendezvous round]} from the agents' logs."""
    results = {}
    for pid, field, value in AGENT_FIELD.findall(output):
        rounds = results.setdefault(pid, [])
        if field == "restart_count":  # the first field of a round's report
            rounds.append({})
        if rounds:
            rounds[-1][field] = value
    return results


def test_the_sbatch_script_trains_on_two_nodes_and_survives_a_lost_worker(
    slurm_installed, tmp_path
):
    # The lesson's files in a folder of their own: the job writes where it is submitted.
    lesson = tmp_path / "05_mingpt"
    ignored = shutil.ignore_patterns("*.ipynb", "*.pt", "*.jsonl", "*.out", "__pycache__")
    shutil.copytree(LESSON, lesson, ignore=ignored)
    data = lesson_05_text(tmp_path)
    # Rank 1 (node 2) is killed in the second epoch: both nodes' torchruns restart the
    # group and resume from the first epoch's snapshot (a rendezvous store per round, or
    # the new workers dial the dead ones and hang).
    port = free_port()  # reserved: the script's own pick could be taken before the bind
    _, train_set, _, _ = char_dataset.build_datasets(str(data), 32, 0.1, 1337)
    steps = len(train_set) // 32  # windows per epoch over the global batch
    with slurm.LocalCluster() as cluster:
        exported = f"--export=ALL,LOGLEVEL=INFO,RDZV_PORT={port},NPROC_PER_NODE=1"
        job_id = cluster.sbatch(
            SBATCH, "--data", str(data), *TINY.split(), cwd=lesson, show=True,
            options=["--gpus-per-node=0", exported],
        )  # fmt: skip
        # Rank 1's worker found while the first epoch trains, and killed at the second
        # epoch's first progress line (every 5 steps), 17 steps before its end.
        cluster.wait_for_line(job_id, rf"^\[rank0\] epoch 1/2 step \d+/{2 * steps} ", 240)
        [rank1] = workers_of_rank(1, SLURM_JOB_ID=str(job_id))
        cluster.wait_for_line(job_id, rf"^\[rank0\] epoch 2/2 step \d+/{2 * steps} ", 120)
        rank1.send_signal(signal.SIGKILL)
        job, output = cluster.wait(job_id, timeout=240)
    assert job["JobState"] == "COMPLETED", output

    assert re.search(
        r"job \d+: 2 node\(s\) x 1 process\(es\) \(CPUs, gloo\), "
        rf"rendezvous at node1 \(127\.0\.0\.1\):{port}$",
        output,
        re.M,
    ), output
    # An agent per node, each starting one worker, ranks 0 and 1 of 2, in both attempts.
    assert output.count("world of 2 on cpu (gloo)") == 2, output
    results = rendezvous_results(output)
    assert len(results) == 2 and all(len(rounds) == 2 for rounds in results.values()), results
    for round_ in (0, 1):
        layout = sorted(
            (r["group_rank"], r["local_ranks"], r["global_ranks"], r["global_world_sizes"])
            for r in (rounds[round_] for rounds in results.values())
        )
        assert layout == [("0", "[0]", "[0]", "[2]"), ("1", "[0]", "[1]", "[2]")], results
    # MASTER_ADDR is node 0's NodeAddr, not an FQDN another node need not resolve.
    masters = {r["master_addr"] for rounds in results.values() for r in rounds}
    assert masters == {"127.0.0.1"}, results

    for rank in range(2):
        assert f"[rank{rank}] resuming from snapshot snapshot.pt: 1 epochs, {steps} steps" in output
    assert f"[rank0] trained {steps} steps in" in output  # the second epoch, after the restart
    assert "tokens/s over 2 process(es)" in output
    assert "[rank0] sample:" in output

    records = metrics(lesson)
    val = [r for r in records if r["kind"] == "val"]
    assert [r["step"] for r in val] == [0, steps, 2 * steps]
    assert all(math.isfinite(r["loss"]) for r in records)
    assert val[-1]["loss"] < val[0]["loss"] - 0.5  # it learned

    snapshot = torch.load(lesson / "snapshot.pt")
    assert (snapshot["epochs_run"], snapshot["step"]) == (2, 2 * steps)
    assert len(snapshot["rng"]) == 2  # every rank's random state, gathered by rank 0
    assert list(lesson.glob("mingpt-ddp-*.out"))  # the job's output file, beside them
