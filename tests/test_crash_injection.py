"""The once-per-job rule of failure injection (common/crash_injection.py): a job has
restarted if any agent restarted its workers, whatever the other nodes' counts say."""

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from common.crash_injection import restarts_of_the_job
from common.ports import free_port


def count_in_world(rank, world_size, port, counts, folder):
    # Each process plays one node's worker, with its agent's restart count (None: unset,
    # as on torchrun's first attempt of a worker that was never restarted).
    if counts[rank] is None:
        os.environ.pop("TORCHELASTIC_RESTART_COUNT", None)
    else:
        os.environ["TORCHELASTIC_RESTART_COUNT"] = str(counts[rank])
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size
    )
    try:
        (folder / f"rank{rank}").write_text(str(restarts_of_the_job(torch.device("cpu"))))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(
    "counts, job",
    [
        ([None, None, None], 0),  # the job's first attempt
        ([0, 2, None], 2),  # node 1's agent restarted twice; the others saw new rounds only
        ([1, 1, 1], 1),
    ],
    ids=["first-attempt", "one-node-restarted", "all-restarted"],
)
def test_every_rank_gets_the_largest_count_of_any_agent(counts, job, tmp_path):
    # Answers come back as files: no Manager, whose server process would be forked
    # from this multi-threaded test process (Python 3.12 warns: it may deadlock).
    mp.spawn(count_in_world, args=(len(counts), free_port(), counts, tmp_path), nprocs=len(counts))
    answers = [int((tmp_path / f"rank{rank}").read_text()) for rank in range(len(counts))]
    assert answers == [job] * len(counts)
